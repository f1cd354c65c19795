package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// What health uses to follow its dependency's calls: the wakeup that ends
// the retries' backoff when a probe succeeds, and the watch of the calls
// outstanding.

// wakeup lets a successful probe end the backoff sleeps of the retries
// waiting for a dependency.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next broadcast.
func (w *wakeup) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *wakeup) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// callWatch knows the outstanding calls to a dependency: since when the
// oldest runs, and how to cancel those that began before a point in time.
type callWatch struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]call
	// failedAt is when a call last ended with an error (unix nanos).
	failedAt atomic.Int64
}

// failed records that a call ended with an error.
func (w *callWatch) failed() { w.failedAt.Store(time.Now().UnixNano()) }

// failedSince reports whether a call ended with an error after t.
func (w *callWatch) failedSince(t time.Time) bool { return w.failedAt.Load() > t.UnixNano() }

type call struct {
	start  time.Time
	cancel context.CancelFunc // nil: not to be cut short
	cut    bool               // cancelBefore cancelled it
}

// start registers a call and the function that cancels it (nil: never
// cancelled); the caller passes the id to end.
func (w *callWatch) start(cancel context.CancelFunc) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == nil {
		w.open = map[uint64]call{}
	}
	w.next++
	w.open[w.next] = call{start: time.Now(), cancel: cancel}
	return w.next
}

// end unregisters a call and reports whether cancelBefore cut it short.
func (w *callWatch) end(id uint64) (cut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut = w.open[id].cut
	delete(w.open, id)
	return cut
}

// oldest is the age of the oldest outstanding call (0: none).
func (w *callWatch) oldest() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, c := range w.open {
		if first.IsZero() || c.start.Before(first) {
			first = c.start
		}
	}
	if first.IsZero() {
		return 0
	}
	return time.Since(first)
}

// cancelBefore cancels the cancellable calls that began before t and
// reports how many.
func (w *callWatch) cancelBefore(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id, c := range w.open {
		if c.cancel != nil && !c.cut && c.start.Before(t) {
			c.cancel()
			c.cut = true
			w.open[id] = c
			n++
		}
	}
	return n
}
