package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDiskProbeTimesSyncsAndLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	p := startDiskProbe(dir)
	time.Sleep(10 * diskProbeEvery)
	s := p.stop()
	if s.err != nil {
		t.Fatalf("probe: %v", s.err)
	}
	if len(s.syncs) < 3 {
		t.Fatalf("%d syncs in %s, want about 10", len(s.syncs), 10*diskProbeEvery)
	}
	if !slices.IsSorted(s.syncs) || s.syncs[0] <= 0 {
		t.Fatalf("syncs not sorted positive durations: %v", s.syncs)
	}
	if s.slowest[0] != s.syncs[len(s.syncs)-1] && s.slowest[1] != s.syncs[len(s.syncs)-1] {
		t.Fatalf("the worst sync %s is no second's worst: %v", s.syncs[len(s.syncs)-1], s.slowest)
	}
	if got := s.slowSeconds(0, 1); !strings.HasPrefix(got, "0s:") {
		t.Fatalf("slowSeconds over 0 = %q, want second 0 listed", got)
	}
	if got := s.slowSeconds(time.Hour, 1); got != "none" {
		t.Fatalf("slowSeconds over an hour = %q, want none", got)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("the probe left %v (%v)", left, err)
	}
}

func TestDiskProbeReportsAnUnusableDirectory(t *testing.T) {
	s := startDiskProbe("/nonexistent/bench-disk-probe").stop()
	if s.err == nil || len(s.syncs) != 0 {
		t.Fatalf("err %v, %d syncs: want an error and no syncs", s.err, len(s.syncs))
	}
}
