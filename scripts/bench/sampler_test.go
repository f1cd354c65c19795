package main

import "testing"

func TestWaitsPerSecondAndOverall(t *testing.T) {
	o := observation{
		waits:         map[string]int{"CPU": 6, "IO:WALSync": 2, "Lock:extend": 1},
		samples:       4,
		secondWaits:   map[int]map[string]int{1: {"CPU": 3, "IO:WALSync": 1, "Lock:extend": 1}},
		secondSamples: map[int]int{1: 2, 2: 2},
	}
	if got, want := o.topWaits(2), "CPU 1.5, IO:WALSync 0.5 (avg. backends)"; got != want {
		t.Errorf("topWaits = %q, want %q", got, want)
	}
	// Ties go by name: IO:WALSync before Lock:extend.
	if got, want := o.waitsIn(1, 2), "CPU 1.5, IO:WALSync 0.5"; got != want {
		t.Errorf("waitsIn(1) = %q, want %q", got, want)
	}
	if got := o.waitsIn(2, 2); got != "" {
		t.Errorf("waitsIn of a second sampled with nothing active = %q, want empty", got)
	}
	if got := (observation{}).topWaits(5); got != "none active" {
		t.Errorf("topWaits of nothing = %q", got)
	}
}
