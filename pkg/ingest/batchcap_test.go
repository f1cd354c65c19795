package ingest

import "testing"

// The cap drops to what fitted, grows back by a quarter (at least one) only
// after a full batch committed on the first attempt, and stays within
// [1, BatchSize].
func TestBatchCap(t *testing.T) {
	c := newBatchCap(500)
	steps := []struct {
		size, fits int
		fast       bool
		want       int
	}{
		{500, 0, true, 500}, // full and fine: nothing to do
		{500, 125, false, 125},
		{100, 0, true, 125},  // not full: no evidence that more fits
		{125, 0, false, 125}, // full but not first time: no growth
		{125, 0, true, 156},
		{156, 200, false, 156}, // a part larger than the cap fitted: not above the cap
		{156, 1, false, 1},
		{1, 0, true, 2},
		{2, 0, true, 3},
	}
	for i, s := range steps {
		c.observe(s.size, s.fits, s.fast)
		if got := c.limit(); got != s.want {
			t.Fatalf("step %d (%+v): cap %d, want %d", i, s, got, s.want)
		}
	}
	for range 100 {
		c.observe(c.limit(), 0, true)
	}
	if c.limit() != 500 {
		t.Fatalf("cap %d after many full batches, want 500", c.limit())
	}
}
