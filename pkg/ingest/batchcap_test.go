package ingest

import "testing"

// The cap drops to what fitted, grows back by a quarter (at least one) only
// after a full batch committed on the first attempt, stays below the
// smallest size that timed out until capClearAfter such batches cleared it,
// and stays within [1, BatchSize].
func TestBatchCap(t *testing.T) {
	c := newBatchCap(500)
	steps := []struct {
		size, fits, tooBig int
		fast               bool
		want               int
	}{
		{500, 0, 0, true, 500}, // full and fine: nothing to do
		{500, 125, 250, false, 125},
		{100, 0, 0, true, 125},  // not full: no evidence that more fits
		{125, 0, 0, false, 125}, // full but not first time: no growth
		{125, 0, 0, true, 156},
		{156, 0, 0, true, 195},
		{195, 0, 0, true, 243},
		{243, 0, 0, true, 249}, // not to 250, which timed out
		{249, 0, 0, true, 249},
		{249, 200, 0, false, 200}, // a part fitted below the cap
		{200, 1, 2, false, 1},
		{1, 0, 0, true, 1}, // 2 timed out
	}
	for i, s := range steps {
		c.observe(s.size, s.fits, s.tooBig, s.fast)
		if got := c.limit(); got != s.want {
			t.Fatalf("step %d (%+v): cap %d, want %d", i, s, got, s.want)
		}
	}
	for range capClearAfter - 2 {
		c.observe(c.limit(), 0, 0, true)
	}
	if c.limit() != 1 {
		t.Fatalf("cap %d before the memory of the timeout clears, want 1", c.limit())
	}
	for range 100 {
		c.observe(c.limit(), 0, 0, true)
	}
	if c.limit() != 500 {
		t.Fatalf("cap %d after many full batches, want 500", c.limit())
	}
}
