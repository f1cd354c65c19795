package testenv

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestMainRun: Stop hands back run's error, and a run the test never
// stopped is cancelled and waited for by the cleanup, not left running.
func TestMainRun(t *testing.T) {
	t.Parallel()
	want := errors.New("run's own error")
	m := StartMain(t, "stub", func(ctx context.Context) error { <-ctx.Done(); return want })
	if err := m.Stop(); !errors.Is(err, want) {
		t.Fatalf("Stop: %v, want %v", err, want)
	}

	var returned atomic.Bool
	t.Run("not stopped", func(t *testing.T) {
		StartMain(t, "stub", func(ctx context.Context) error { <-ctx.Done(); returned.Store(true); return nil })
	})
	if !returned.Load() {
		t.Fatal("run still going after the test that started it ended")
	}
}
