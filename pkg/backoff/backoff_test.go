package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesWithinEqualJitterAndCaps(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	nominal := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, n := range nominal {
		n *= time.Millisecond
		d := b.Next()
		if d < n/2 || d > n {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, d, n/2, n)
		}
	}
	b.Reset()
	if d := b.Next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("after Reset, wait = %v, want within [50ms, 100ms]", d)
	}
}

func TestNextNeverOverflowsNearTheCap(t *testing.T) {
	b := New(time.Duration(1<<61), time.Duration(1<<62))
	for range 10 {
		if d := b.Next(); d <= 0 {
			t.Fatalf("wait = %v, want positive", d)
		}
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported the full wait on a cancelled context")
	}
	if time.Since(start) > time.Second {
		t.Fatal("Sleep did not return promptly on a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep(1ms) reported an early end")
	}
}
