package main

import (
	"testing"
	"time"
)

// TestHalfPeaks: a saw-tooth that does not grow passes peak against peak,
// one that grows does not, and readings that failed or lie outside the
// range are left out.
func TestHalfPeaks(t *testing.T) {
	at := func(min float64, mb int64, read bool) sample {
		return sample{T: time.Duration(min * float64(time.Minute)), DBRead: read, Heap: mb * 1e6}
	}
	flat := []sample{
		at(20, 9000, true), // before from: the hold's bloat
		at(23, 1300, true), at(24, 1430, true), at(25, 1330, true),
		at(27, 1290, true), at(28, 1420, true), at(29, 9999, false), at(30, 1470, true),
	}
	first, second, ok := halfPeaks(flat, 22*time.Minute, 30*time.Minute)
	if !ok || first != 1430e6 || second != 1470e6 {
		t.Fatalf("halfPeaks(flat) = %d, %d, %v; want 1430 MB, 1470 MB, true", first, second, ok)
	}
	if float64(second) > 1.05*float64(first) {
		t.Fatalf("a flat saw-tooth judged as growth: %d then %d", first, second)
	}
	growing := []sample{at(23, 1300, true), at(25, 1400, true), at(27, 1600, true), at(29, 1800, true)}
	first, second, _ = halfPeaks(growing, 22*time.Minute, 30*time.Minute)
	if float64(second) <= 1.05*float64(first) {
		t.Fatalf("growth 1400 → 1800 MB not seen: %d then %d", first, second)
	}
	if _, _, ok := halfPeaks(flat[:3], 22*time.Minute, 30*time.Minute); ok {
		t.Fatal("no reading in the second half, yet ok")
	}
}

// TestBoundedTarget: the relay's gauges stand in for a count that timed
// out; a sample read by neither fails the target, and so does a held
// sample over either bound.
func TestBoundedTarget(t *testing.T) {
	ok := func(pending int64, oldest float64, hold bool, from string) sample {
		return sample{PendingFrom: from, Pending: pending, OldestPending: oldest, Hold: hold}
	}
	cases := []struct {
		name    string
		samples []sample
		pass    bool
	}{
		{"all counted", []sample{ok(300, 0.4, false, "sql"), ok(900, 1.2, true, "sql")}, true},
		{"one from the relay", []sample{ok(300, 0.4, false, "sql"), ok(700, 1.5, true, "relay")}, true},
		{"one unread", []sample{ok(300, 0.4, false, "sql"), {Hold: true}}, false},
		{"too many during the hold", []sample{ok(300, 0.4, false, "sql"), ok(10_000, 2, true, "sql")}, false},
		{"too old during the hold", []sample{ok(300, 0.4, false, "sql"), ok(500, 10.5, true, "relay")}, false},
	}
	for _, c := range cases {
		got := boundedTarget(c.samples, 10_000)
		if got.pass != c.pass {
			t.Errorf("%s: pass = %v, want %v (%s)", c.name, got.pass, c.pass, got.detail)
		}
	}
}

// TestCountSlow: a slow window is put down to a checkpoint's end, a broker
// pause or a slow commit in it or in the window before (not to a
// checkpoint's start, nor to a probe acknowledged within brokerStallMs),
// windows of the hold and windows without outputs are left out, and a slow
// window with none of them counts for none.
func TestCountSlow(t *testing.T) {
	w := func(p99, syncMs float64, slowCommits int64, hold bool, outputs int64) sample {
		return sample{P99: p99, CheckpointSyncMs: syncMs, SlowCommits: slowCommits, Hold: hold, Outputs: outputs}
	}
	ss := []sample{
		w(20, 0, 0, false, 2000),                       // normal
		w(30, 450, 0, false, 2000),                     // a checkpoint ends, latency fine
		w(300, 0, 0, false, 2000),                      // slow, after the checkpoint
		w(200, 0, 5, false, 2000),                      // slow, with slow commits
		w(900, 0, 0, true, 2000),                       // the hold: left out
		w(150, 0, 0, false, 2000),                      // slow, none of them
		w(0, 0, 0, false, 0),                           // no outputs: left out
		{P99: 400, CheckpointsBegun: 1, Outputs: 2000}, // slow as one begins: not its end
		{P99: 20, BrokerAckMs: 40, Outputs: 2000},      // a probe within brokerStallMs
		{P99: 250, BrokerAckMs: 210, Outputs: 2000},    // slow, the broker paused
		{P99: 120, Outputs: 2000},                      // slow, after the pause
		{P99: 20, Outputs: 2000},                       // normal
	}
	got := countSlow(ss)
	want := slowCounts{windows: 10, ckpt: 2, stall: 2, slow: 6, slowCkpt: 1, slowStall: 2, slowCommit: 1}
	if got != want {
		t.Fatalf("countSlow = %+v, want %+v", got, want)
	}
}
