package relay

import (
	"context"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
)

// retention deletes PUBLISHED rows older than Retention in small statements,
// so no statement holds many locks or writes a burst of WAL. Each statement
// starts at the published_at where the last one ended, less sweepMargin
// (see store's DeletePublished); every sweepFullScanInterval a sweep starts
// from the oldest row again.
//
// A full scan that fails before it gets anywhere leaves the position where
// the last sweep ended: while a snapshot is held, a statement from the
// oldest row walks every dead index entry and runs out of its time, and
// starting every later sweep there deleted nothing until the hold ended.
func (r *Relay) retention(ctx context.Context) {
	var from, fullScan time.Time
	every(ctx, r.cfg.RetentionInterval, func() {
		start := from
		if time.Since(fullScan) >= sweepFullScanInterval {
			start, fullScan = time.Time{}, time.Now()
		}
		total, next := r.sweep(ctx, start)
		if !next.IsZero() {
			from = next
		}
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
