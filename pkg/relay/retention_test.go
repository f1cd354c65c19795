package relay

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// heldSnapshotOutbox answers retention's statements as a database with a
// snapshot held since just after the first sweep: a statement from the
// oldest row (from zero) walks every dead index entry and runs out of its
// time; one from where the last ended deletes a few rows.
type heldSnapshotOutbox struct {
	*fakeOutbox
	mu    sync.Mutex
	froms []time.Time
}

func (h *heldSnapshotOutbox) DeletePublished(ctx context.Context, _ time.Duration, _ int, from time.Time) (int64, time.Time, error) {
	h.mu.Lock()
	h.froms = append(h.froms, from)
	first := len(h.froms) == 1
	h.mu.Unlock()
	if from.IsZero() && !first {
		<-ctx.Done()
		return 0, time.Time{}, ctx.Err()
	}
	return 10, time.Now().Add(-time.Hour), nil // under the batch: the sweep ends
}

// A full scan that fails at its first statement does not send the sweeps
// after it back to the oldest row: in 15 minutes, the full scan at the start
// and the one 10 minutes later, every other sweep from where the last ended.
func TestSweepKeepsItsPositionAfterAFailedFullScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &heldSnapshotOutbox{fakeOutbox: &fakeOutbox{}}
		r, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), o, &fakePublisher{}, Config{Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.retention(ctx); close(done) }()
		time.Sleep(15 * time.Minute)
		cancel()
		<-done
		o.mu.Lock()
		defer o.mu.Unlock()
		fromZero := 0
		for _, f := range o.froms {
			if f.IsZero() {
				fromZero++
			}
		}
		if len(o.froms) < 60 || fromZero != 2 {
			t.Errorf("%d statements, %d of them from the oldest row; want at least 60 (a sweep every %s), 2 from the oldest row",
				len(o.froms), fromZero, r.cfg.RetentionInterval)
		}
	})
}
