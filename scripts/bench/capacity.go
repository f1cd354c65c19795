package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/pcp/route-processing/scripts/internal/machine"
)

// capacityRounds is how many times each reading takes each measure
// (machine.MeasureCapacity): about 1.7 s between phases, never inside a
// timing.
const capacityRounds = 3

// capacityReading is the host's CPU capacity measured just before a phase
// ran (or at the end of the run).
type capacityReading struct {
	when string // "before ingest", …, "at the end"
	c    machine.Capacity
}

// readCapacity measures the host's capacity now and says it. What this
// host gives the VM moves by itself, and /proc/stat does not show it as
// stolen time (machine.Capacity): a run whose phases saw different
// capacities compares figures taken on different machines.
func readCapacity(when string) capacityReading {
	r := capacityReading{when: when, c: machine.MeasureCapacity(capacityRounds)}
	say("bench: what the host gives %s: %s", when, r.c)
	return r
}

// capacitySummary is the readings' ranges for the table's Machine row,
// e.g. "1.46–2.00 cores' worth of 2, a system call 0.98–1.04 µs, a thread
// switch 26–31 µs", or "" without readings.
func capacitySummary(rs []capacityReading) string {
	if len(rs) == 0 {
		return ""
	}
	cores, sys, sw := capacityFigures(rs)
	return fmt.Sprintf("%s cores' worth of %d, a system call %s µs, a thread switch %s µs",
		spreadOrOne(cores, "%.2f"), rs[0].c.CPUs, spreadOrOne(sys, "%.2f"), spreadOrOne(sw, "%.0f"))
}

// capacityWarning says, for the targets' note, when the host changed
// during the run: all cores together did under nine tenths of their best
// reading, or a thread switch cost over twice its cheapest (it moves by
// half between the phases of one quiet run). Each phase's figures, and a
// ratio of two phases, then carry the change; "" when the readings agree.
func capacityWarning(rs []capacityReading) string {
	if len(rs) < 2 {
		return ""
	}
	cores, _, sw := capacityFigures(rs)
	if slices.Min(cores) >= 0.9*slices.Max(cores) && slices.Max(sw) <= 2*slices.Min(sw) {
		return ""
	}
	return fmt.Sprintf("The host changed during this run (%s cores' worth, a thread switch %s µs between phases; What the machine was doing): a phase run while the host gave less is slower for it, and so is a ratio that pairs it with another phase.",
		spreadOrOne(cores, "%.2f"), spreadOrOne(sw, "%.0f"))
}

// capacityFigures are the readings' cores' worth, and their system call
// and thread switch in µs.
func capacityFigures(rs []capacityReading) (cores, syscall, switches []float64) {
	for _, r := range rs {
		cores = append(cores, r.c.Cores())
		syscall = append(syscall, float64(r.c.Syscall)/float64(time.Microsecond))
		switches = append(switches, float64(r.c.Switch)/float64(time.Microsecond))
	}
	return cores, syscall, switches
}

// spreadOrOne is spread, or one figure when both ends print alike.
func spreadOrOne(xs []float64, f string) string {
	if lo := fmt.Sprintf(f, slices.Min(xs)); lo == fmt.Sprintf(f, slices.Max(xs)) {
		return lo
	}
	return spread(xs, f)
}
