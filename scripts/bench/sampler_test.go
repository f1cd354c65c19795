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

func TestVacuumsPerSecondAndSpans(t *testing.T) {
	o := observation{secondVacuums: map[int]map[string]bool{
		3: {"VACUUM public.route_passports": true},
		4: {"VACUUM public.route_passports": true, "VACUUM ANALYZE public.route_passport_outbox": true},
		5: {"VACUUM public.route_passports": true},
		9: {"VACUUM public.route_passports": true},
	}}
	if got, want := o.vacuumsIn(4), "VACUUM ANALYZE public.route_passport_outbox, VACUUM public.route_passports"; got != want {
		t.Errorf("vacuumsIn(4) = %q, want %q", got, want)
	}
	if got := o.vacuumsIn(6); got != "" {
		t.Errorf("vacuumsIn of a second without autovacuum = %q, want empty", got)
	}
	if got, want := o.vacuumSeconds(), "VACUUM ANALYZE public.route_passport_outbox 4 s; VACUUM public.route_passports 3-5,9 s"; got != want {
		t.Errorf("vacuumSeconds = %q, want %q", got, want)
	}
	if got := (observation{}).vacuumSeconds(); got != "none" {
		t.Errorf("vacuumSeconds of nothing = %q, want none", got)
	}
}

func TestCoresPerSecond(t *testing.T) {
	o := observation{secondCores: map[int]map[string]float64{
		2: {"ingestor": 0.41, "postgres": 1.14, machineCores: 1.93},
	}}
	if got, want := o.coresIn(2), "ingestor 0.4, postgres 1.1; machine 1.9"; got != want {
		t.Errorf("coresIn(2) = %q, want %q", got, want)
	}
	if got := o.coresIn(3); got != "" {
		t.Errorf("coresIn of a second not sampled = %q, want empty", got)
	}
}
