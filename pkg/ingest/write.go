package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
)

// write writes the valid records of b: the pipelined fast attempt, then,
// if it failed, the careful way.
func (in *Ingestor) write(ctx context.Context, b *batch, valid []*item) {
	defer close(b.dbDone)
	b.wrote = len(valid)
	if len(valid) > 0 {
		in.dbWriters.Add(1)
		defer in.dbWriters.Add(-1)
		var span trace.Span
		ctx, span = in.startSpan(ctx, spanWrite, len(valid))
		defer span.End()
	}
	err := in.writeFast(ctx, b, valid)
	if err == nil {
		in.markWritten(valid)
		return
	}
	if b.prev != nil && !wait(ctx, b.prev.dbDone) {
		return
	}
	b.fits, b.tooBig = in.writeSlow(ctx, valid, err)
}

// errPredecessorFailed aborts a fast attempt whose predecessor failed.
var errPredecessorFailed = errors.New("predecessor batch failed")

// writeFast writes valid in one transaction, ordered after b.prev. It
// always closes b.applied and b.fastDone.
func (in *Ingestor) writeFast(ctx context.Context, b *batch, valid []*item) (err error) {
	sig := &fastSignals{b: b}
	defer func() { sig.done(err) }()
	if len(valid) == 0 {
		return followEmpty(ctx, b.prev, sig)
	}
	chained, err := chainedTo(ctx, b)
	if err != nil {
		return err
	}
	if chained {
		return in.writeChained(ctx, b.prev, valid, sig)
	}
	return in.writeAlone(ctx, b.prev, valid, sig)
}

// fastSignals closes a batch's signals to the batch after it, each once:
// applied (with applyFailed), and fastDone last (with fastFailed). See
// batch.
type fastSignals struct {
	b             *batch
	appliedClosed bool
}

func (s *fastSignals) applied(failed bool) {
	if !s.appliedClosed {
		s.appliedClosed = true
		s.b.applyFailed = failed
		close(s.b.applied)
	}
}

// done ends the fast attempt with err: what was not signalled yet will not
// happen (the statements did not run).
func (s *fastSignals) done(err error) {
	s.applied(true)
	s.b.fastFailed = err != nil
	close(s.b.fastDone)
}

// followEmpty ends the fast attempt of a batch with nothing to write: its
// successor must still see the state of the chain before it.
func followEmpty(ctx context.Context, prev *batch, sig *fastSignals) error {
	if prev == nil {
		return nil
	}
	if !wait(ctx, prev.applied) {
		return ctx.Err()
	}
	sig.applied(prev.applyFailed)
	if !wait(ctx, prev.fastDone) {
		return ctx.Err()
	}
	if prev.fastFailed {
		return errPredecessorFailed
	}
	return nil
}

// chainedTo reports whether b must commit after b.prev: a predecessor
// still writing shares a route with it. One that shares none cannot hold
// a lock b needs nor be overwritten by b, so b does not wait for it: it
// writes and commits on its own, on a second backend (the two commits may
// share a WAL flush: see store.Passports.Write). No batch but prev can be
// unfinished: batches report in dispatch order (dispatch), so a slot frees
// only when every batch before it is done.
func chainedTo(ctx context.Context, b *batch) (bool, error) {
	prev := b.prev
	if prev == nil || closed(prev.fastDone) {
		return false, nil
	}
	if !wait(ctx, prev.parsed) {
		return false, ctx.Err()
	}
	return overlaps(b.routes, prev.routes), nil
}

// writeAlone writes valid with its commit in one round trip.
func (in *Ingestor) writeAlone(ctx context.Context, prev *batch, valid []*item, sig *fastSignals) error {
	if prev != nil && closed(prev.fastDone) && prev.fastFailed {
		return errPredecessorFailed
	}
	if err := in.writeOnce(ctx, valid); err != nil {
		in.noteDBError(ctx, err)
		return err
	}
	sig.applied(false)
	in.dbHealth.ok(ctx)
	return nil
}

// writeChained writes valid once prev holds its row locks, so that its
// rows queue behind prev's, and commits after prev.
func (in *Ingestor) writeChained(ctx context.Context, prev *batch, valid []*item, sig *fastSignals) (err error) {
	if !wait(ctx, prev.applied) {
		return ctx.Err()
	}
	if prev.applyFailed {
		return errPredecessorFailed
	}
	tx, err := in.beginWrite(ctx, valid)
	if err != nil {
		in.noteDBError(ctx, err)
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	sig.applied(false)
	if !wait(ctx, prev.fastDone) {
		return ctx.Err()
	}
	if prev.fastFailed {
		return errPredecessorFailed
	}
	if err := in.dbCall(ctx, in.cfg.DBTimeout, tx.Commit); err != nil {
		in.noteDBError(ctx, err)
		return err
	}
	in.dbHealth.ok(ctx)
	return nil
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// writeOnce writes items in a transaction of its own and commits it, in one
// database call. The call carries the statements and the commit, so it gets
// a bound for each (onceTimeout).
func (in *Ingestor) writeOnce(ctx context.Context, items []*item) error {
	accepted := acceptedOf(items)
	return in.dbCall(ctx, in.onceTimeout(), func(c context.Context) error { return in.store.Write(c, accepted) })
}

// onceTimeout bounds a write's statements and commit sent together: a
// DBTimeout for each, what they had as two calls. With one, a write
// that fits its statement bound but commits slowly (a freshly promoted
// primary writing full pages) would time out and be retried for nothing.
func (in *Ingestor) onceTimeout() time.Duration { return 2 * in.cfg.DBTimeout }

// beginWrite begins a transaction and runs items' statements in it, in one
// database call; the commit is the caller's.
func (in *Ingestor) beginWrite(ctx context.Context, items []*item) (tx store.WriteTx, err error) {
	accepted := acceptedOf(items)
	err = in.dbCall(ctx, in.cfg.DBTimeout, func(c context.Context) error {
		tx, err = in.store.BeginWrite(c, accepted, in.heldIdleBound())
		return err
	})
	return tx, err
}

// heldIdleBound is how long a held transaction may sit idle before the
// server ends its session. It waits only for the batch ahead, whose write
// is bounded by onceTimeout (the one before that has finished: a slot
// frees when a batch ends), so a live ingestor never reaches it; one that
// froze, or whose node vanished, while holding it (its row locks stop the
// ingestor that took its partitions over) loses it within seconds of the
// group's session timeout handing the partitions on (8 s against 10 s by
// default). Were it reached wrongly, the commit would fail as an outage:
// consumption pauses until the batch is written again. PostgreSQL takes
// at most INT_MAX milliseconds.
func (in *Ingestor) heldIdleBound() time.Duration {
	return min(in.onceTimeout()+2*time.Second, 24*time.Hour)
}

func acceptedOf(items []*item) []passport.Accepted {
	accepted := make([]passport.Accepted, len(items))
	for i, it := range items {
		accepted[i] = it.acc
	}
	return accepted
}

// dbCall runs fn bounded by bound and registered with the
// database's call watch, so that a hung call shows in /readyz before its
// timeout and is cut short when the database answers again (see watch). A
// call cut so fails as unavailable, not as cancelled: the write is retried
// at once instead of abandoned.
func (in *Ingestor) dbCall(ctx context.Context, bound time.Duration, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	id := in.dbHealth.calls.start(cancel)
	start := time.Now()
	err := fn(cctx)
	if err != nil {
		in.dbHealth.calls.failed()
	} else {
		in.dbHealth.patience.Worked(time.Since(start))
	}
	if cut := in.dbHealth.calls.end(id); cut && err != nil && ctx.Err() == nil {
		// %v, not %w: the cut's context.Canceled must not reach
		// store.Classify, which would take it for a stop, not an outage.
		return fmt.Errorf("database call cut short (sent while the database did not answer; it answers again): %v", err)
	}
	return err
}

// noteDBError reports an unavailable database at once, so the poll loop
// pauses without waiting for the retries; a slow one is not unavailable.
func (in *Ingestor) noteDBError(ctx context.Context, err error) {
	if store.Classify(err) == store.KindUnavailable && ctx.Err() == nil && !in.slow(ctx, err) {
		in.dbHealth.fail(ctx, err)
	}
}

func (in *Ingestor) markWritten(items []*item) {
	now := time.Now()
	for _, it := range items {
		it.done = true
		in.metrics.stageCommitted.Observe(now.Sub(it.parsed).Seconds())
	}
	in.metrics.success.Add(float64(len(items)))
}
