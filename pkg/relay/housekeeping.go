package relay

import (
	"context"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
)

// watchControl reads the pause flag every poll interval for the paused gauge
// and the log; the claim itself honours the flag.
func (r *Relay) watchControl(ctx context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		c, cancel := r.dbCall(ctx)
		control, err := r.outbox.Control(c)
		cancel()
		r.showDBWhileNoClaims(ctx, err)
		paused := control.Paused
		if err == nil && r.paused.Swap(paused) != paused {
			r.showKafkaReady()
			if paused {
				r.m.paused.Set(1)
				r.logger.WarnContext(ctx, "paused by an operator; no new claims until `outbox-relay resume`",
					"reason", control.Reason, "by", control.UpdatedBy, "since", control.UpdatedAt.UTC().Format(time.RFC3339))
			} else {
				r.m.paused.Set(0)
				r.logger.InfoContext(ctx, "resumed")
				r.Wake()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// showDBWhileNoClaims reports the database's state from the pause-flag
// read while no claim runs (Kafka down, so claims wait): otherwise
// /readyz would say "not connected yet" of a database that answers, or of
// one that was never migrated. A failure of the read is shown as any
// other; a success clears only what the read itself (or the start) showed,
// never a failure another call reported (a release retried until its
// lease ends, a write refused while reads pass), which would make /readyz
// alternate. Once claims run, they own the state.
func (r *Relay) showDBWhileNoClaims(ctx context.Context, err error) {
	if !r.kafkaDown.Load() || ctx.Err() != nil {
		return
	}
	if err != nil {
		r.dbFailed("read the pause flag", err)
		r.dbByControl.Store(true)
		return
	}
	if r.dbByControl.Load() {
		r.setDBReady("", nil)
		r.dbByControl.Store(true)
	}
}

// refreshGauges keeps the pending, table and index gauges current with
// cheap queries: the PENDING partial index, statistics views and the
// catalog.
func (r *Relay) refreshGauges(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		c, cancel := r.dbCall(ctx)
		s, err := r.outbox.Pending(c)
		cancel()
		if err == nil {
			r.m.pending.Set(float64(s.Pending))
			r.m.failedRows.Set(float64(s.Failed))
			r.m.oldestAge.Set(s.OldestAge.Seconds())
			r.m.pendingAt.SetToCurrentTime()
		}
		h, err := r.tableHealth(ctx)
		if err == nil {
			r.m.oldestXactAge.Set(h.OldestXactAge.Seconds())
			r.m.liveTuples.Set(float64(h.LiveTuples))
			r.m.deadTuples.Set(float64(h.DeadTuples))
			r.m.tableBytes.Set(float64(h.TableBytes))
		} else if ctx.Err() == nil {
			r.logger.DebugContext(ctx, "cannot read outbox table health", "err", err)
		}
		r.refreshIndexGauges(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshIndexGauges sets the size gauge of each valid outbox index, when
// the outbox can list them.
func (r *Relay) refreshIndexGauges(ctx context.Context) {
	if r.indexes == nil {
		return
	}
	c, cancel := r.dbCall(ctx)
	ixs, err := r.indexes.Indexes(c)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.logger.DebugContext(ctx, "cannot read outbox index sizes", "err", err)
		}
		return
	}
	for _, ix := range ixs {
		if ix.Valid {
			r.m.indexBytes.WithLabelValues(ix.Name).Set(float64(ix.Bytes))
			// Exported at 0 before the first rebuild: a query or alert on
			// it finds the series (increase over a window needs one).
			r.m.indexRebuilds.WithLabelValues(ix.Name)
		}
	}
}

// retention deletes PUBLISHED rows older than Retention in small statements,
// so no statement holds many locks or writes a burst of WAL. Each statement
// starts at the published_at where the last one ended, less sweepMargin
// (see store's DeletePublished); every sweepFullScanInterval a sweep starts
// from the oldest row again.
func (r *Relay) retention(ctx context.Context) {
	var from, fullScan time.Time
	every(ctx, r.cfg.RetentionInterval, func() {
		if time.Since(fullScan) >= sweepFullScanInterval {
			from, fullScan = time.Time{}, time.Now()
		}
		var total int64
		total, from = r.sweep(ctx, from)
		if total > 0 {
			r.logger.InfoContext(ctx, "deleted published outbox rows past retention", "rows", total, "retention", r.cfg.Retention)
		}
	})
}

// The sweep's lower bound. A row lands below it only when its mark commits
// more than sweepMargin after the mark's statement began (published_at is
// the database's now() of that statement); the periodic full scan deletes
// such a row at most sweepFullScanInterval late.
const (
	sweepMargin           = 10 * time.Second
	sweepFullScanInterval = 10 * time.Minute
)

// every calls fn each period until ctx ends, the first time one period
// after the start.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// retentionPause separates the statements of a sweep: long enough to let
// the claims and marks that queued behind a statement's WAL flush and buffer
// work through, short enough that the sweep (RetentionBatch rows a
// statement) deletes faster than the relays publish.
const retentionPause = 10 * time.Millisecond

// sweep runs one retention pass from from and returns how many rows it
// deleted and where the next pass may start.
func (r *Relay) sweep(ctx context.Context, from time.Time) (int64, time.Time) {
	total := int64(0)
	for ctx.Err() == nil {
		c, cancel := r.dbCall(ctx)
		n, last, err := r.outbox.DeletePublished(c, r.cfg.Retention, r.cfg.RetentionBatch, from)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.logger.WarnContext(ctx, "retention sweep failed; next sweep will retry", "err", err)
			}
			break
		}
		total += n
		if next := last.Add(-sweepMargin); n > 0 && next.After(from) {
			from = next
		}
		if n < int64(r.cfg.RetentionBatch) {
			break
		}
		backoff.Sleep(ctx, retentionPause)
	}
	return total, from
}
