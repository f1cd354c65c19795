package ingest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCallWatchCutsOnlyCallsSentBeforeTheLastFailedProbe: the calls begun
// before the point are cancelled once and reported cut; a later call, and a
// call registered as not to be cut, run on.
func TestCallWatchCutsOnlyCallsSentBeforeTheLastFailedProbe(t *testing.T) {
	var w callWatch
	oldCtx, oldCancel := context.WithCancel(context.Background())
	defer oldCancel()
	old := w.start(oldCancel)
	keep := w.start(nil)
	time.Sleep(2 * time.Millisecond)
	point := time.Now()
	time.Sleep(2 * time.Millisecond)
	newCtx, newCancel := context.WithCancel(context.Background())
	defer newCancel()
	fresh := w.start(newCancel)

	if n := w.cancelBefore(point); n != 1 {
		t.Fatalf("cancelBefore cut %d calls, want 1", n)
	}
	if n := w.cancelBefore(point); n != 0 {
		t.Errorf("a second cancelBefore cut %d calls again, want 0", n)
	}
	if !errors.Is(oldCtx.Err(), context.Canceled) {
		t.Errorf("the call sent before the point was not cancelled: %v", oldCtx.Err())
	}
	if newCtx.Err() != nil {
		t.Errorf("the call sent after the point was cancelled: %v", newCtx.Err())
	}
	if !w.end(old) {
		t.Error("end did not report the cancelled call as cut")
	}
	if w.end(keep) || w.end(fresh) {
		t.Error("end reported a call that was not cancelled as cut")
	}
	if d := w.oldest(); d != 0 {
		t.Errorf("oldest = %s with no call outstanding, want 0", d)
	}
}
