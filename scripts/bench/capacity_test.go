package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pcp/route-processing/scripts/internal/machine"
)

func TestCapacitySummary(t *testing.T) {
	reading := func(one, all float64, sys, sw time.Duration) capacityReading {
		return capacityReading{c: machine.Capacity{CPUs: 2, OneCore: one, AllCores: all, Syscall: sys, Switch: sw}}
	}
	rs := []capacityReading{
		reading(1600, 3200, 1010*time.Nanosecond, 26*time.Microsecond),
		reading(1600, 2336, 980*time.Nanosecond, 31*time.Microsecond),
		reading(1500, 3000, 1040*time.Nanosecond, 27*time.Microsecond),
	}
	if got, want := capacitySummary(rs), "1.46–2.00 cores' worth of 2, a system call 0.98–1.04 µs, a thread switch 26–31 µs"; got != want {
		t.Errorf("capacitySummary = %q, want %q", got, want)
	}
	if got, want := capacitySummary(rs[:1]), "2.00 cores' worth of 2, a system call 1.01 µs, a thread switch 26 µs"; got != want {
		t.Errorf("one reading: %q, want %q", got, want)
	}
	if got := capacitySummary(nil); got != "" {
		t.Errorf("no reading: %q", got)
	}
}

func TestCapacityWarning(t *testing.T) {
	reading := func(all float64, sw time.Duration) capacityReading {
		return capacityReading{c: machine.Capacity{CPUs: 2, OneCore: 1000, AllCores: all, Switch: sw}}
	}
	steady := []capacityReading{reading(2000, 21*time.Microsecond), reading(1900, 30*time.Microsecond), reading(1950, 32*time.Microsecond)}
	if w := capacityWarning(steady); w != "" {
		t.Errorf("readings within a tenth and 2×: %q", w)
	}
	if w := capacityWarning(steady[:1]); w != "" {
		t.Errorf("one reading: %q", w)
	}
	lesser := append(steady, reading(1460, 27*time.Microsecond))
	if w := capacityWarning(lesser); !strings.Contains(w, "1.46–2.00 cores' worth") {
		t.Errorf("a reading at 73 %% of the best: %q", w)
	}
	slowSwitch := append(steady, reading(2000, 43*time.Microsecond))
	if w := capacityWarning(slowSwitch); !strings.Contains(w, "a thread switch 21–43 µs") {
		t.Errorf("a switch at 2.05× the cheapest: %q", w)
	}
}
