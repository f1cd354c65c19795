package relay

import (
	"context"
	"time"
)

// refreshGauges keeps the pending, table and index gauges current with
// cheap queries: the PENDING partial index, statistics views and the
// catalog.
func (r *Relay) refreshGauges(ctx context.Context) {
	nowAndEvery(ctx, r.cfg.StatsInterval, func() { r.readGauges(ctx) })
}

// readGauges sets the pending, table and index gauges once.
func (r *Relay) readGauges(ctx context.Context) {
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
		r.m.healthAt.SetToCurrentTime()
	} else if ctx.Err() == nil {
		r.logger.DebugContext(ctx, "cannot read outbox table health", "err", err)
	}
	r.refreshIndexGauges(ctx)
}

// refreshIndexGauges sets the size gauge of each valid outbox index, when
// the outbox can list them, and deletes the series of an index gone since
// (dropped by a migration or an operator), which would otherwise keep its
// last size for as long as the process runs.
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
	seen := make(map[string]bool, len(ixs))
	for _, ix := range ixs {
		if ix.Valid {
			seen[ix.Name] = true
			r.m.indexBytes.WithLabelValues(ix.Name).Set(float64(ix.Bytes))
			// Exported at 0 before the first rebuild: a query or alert on
			// it finds the series (increase over a window needs one).
			r.m.indexRebuilds.WithLabelValues(ix.Name)
		}
	}
	for name := range r.indexSeries {
		if !seen[name] {
			r.m.indexBytes.DeleteLabelValues(name)
			r.m.indexRebuilds.DeleteLabelValues(name)
		}
	}
	r.indexSeries = seen
}

// nowAndEvery calls fn at once, then as every does.
func nowAndEvery(ctx context.Context, period time.Duration, fn func()) {
	fn()
	every(ctx, period, fn)
}

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
