package ingest

import (
	"context"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/store"
)

// splitAfterFailures is how many times in a row a span of several records
// fails as "unavailable" while the database answers pings before it is
// split, and how many times a lone record runs out of its bound so before
// it counts as stuck (an outage).
const splitAfterFailures = 2

// writeSlow writes items, in order, one transaction per span: a span the
// database refuses because of one record is split in halves until that
// record is alone; a lone refused record is retried RecordRetries times and
// then dead-lettered as RETRYABLE. While the database is unavailable the
// same span is retried with backoff; a span of several records that keeps
// failing so while the database answers pings is split in halves too, in
// case its size is the problem (a statement too large, a timeout). A
// timeout is never a refusal: store.Classify makes it KindUnavailable. It
// returns when every record is written or dead-lettered, or when ctx ends.
// When a span was split because it timed out, fits is the most records a
// span wrote afterwards and tooBig the smallest span split so (both 0
// otherwise).
//
// A lone record that keeps timing out while the database answers pings is
// not slow but stuck (a lock that a statement_timeout shorter than the
// stuck-write probe's wait cuts before the probe sees it): that is an
// outage.
func (in *Ingestor) writeSlow(ctx context.Context, items []*item, firstErr error) (fits, tooBig int) {
	w := &slowWrite{
		in:         in,
		queue:      [][]*item{items},
		bo:         backoff.New(in.cfg.MinBackoff, in.cfg.MaxBackoff),
		refusedBo:  backoff.New(in.cfg.MinBackoff, in.cfg.MaxBackoff),
		conflictBo: backoff.New(in.cfg.MinBackoff, in.cfg.MaxBackoff),
		refused:    map[*item]int{},
	}
	if store.Classify(firstErr) == store.KindRecord && len(items) > 1 {
		w.queue = halves(items)
	}
	for len(w.queue) > 0 {
		span := in.ownedItems(w.queue[0])
		if len(span) == 0 {
			w.queue = w.queue[1:]
			continue
		}
		w.queue[0] = span
		if !w.try(ctx, span) {
			break
		}
	}
	return w.fits, w.tooBig
}

// slowWrite is one writeSlow: the spans still to write, queue[0] first,
// and what the failures so far say about them.
type slowWrite struct {
	in    *Ingestor
	queue [][]*item
	// One backoff per kind of failure, so that one kind's waits do not
	// grow the other's: the database unavailable, one record refused, lost
	// races in a row.
	bo, refusedBo, conflictBo *backoff.Backoff
	refused                   map[*item]int // refusals of each lone record
	unavailable               int           // failures in a row of queue[0] as unavailable while the database answers
	conflicts                 int           // failures in a row of queue[0] as a lost race
	fits, tooBig              int           // see writeSlow
}

// try writes span (queue[0]) once and acts on the outcome; false when ctx
// ended.
func (w *slowWrite) try(ctx context.Context, span []*item) bool {
	err := w.in.writeOnce(ctx, span)
	kind := store.Classify(err)
	if kind != store.KindUnavailable {
		w.unavailable = 0
	}
	if kind != store.KindConflict {
		w.conflicts = 0
	}
	switch kind {
	case store.KindNone:
		w.in.dbHealth.ok(ctx)
		w.bo.Reset()
		w.in.markWritten(span)
		if w.tooBig > 0 { // after a split for a timeout
			w.fits = max(w.fits, len(span))
		}
		w.queue = w.queue[1:]
		return true
	case store.KindCanceled:
		return false
	case store.KindConflict:
		return w.lostRace(ctx, span, err)
	case store.KindRecord:
		return w.refusedRecord(ctx, span, err)
	default:
		return w.failed(ctx, span, err)
	}
}

// lostRace: span lost a race with a concurrent transaction more often than
// store.Passports.Write runs it again (a deadlock with another ingestor on the same
// routes). The database answers and the span is fine, so neither a pause
// nor a split; again after a pause that grows.
func (w *slowWrite) lostRace(ctx context.Context, span []*item, err error) bool {
	w.in.dbHealth.ok(ctx)
	w.bo.Reset()
	if w.conflicts++; w.conflicts == 1 {
		w.conflictBo.Reset()
	}
	w.in.logger.InfoContext(ctx, "a write lost a race with a concurrent transaction; retrying",
		"records", len(span), "attempt", w.conflicts, "err", err)
	return backoff.Sleep(ctx, w.conflictBo.Next())
}

// refusedRecord: the database refused span because of one of its records.
// A span of several is split; a lone record is retried, then
// dead-lettered.
func (w *slowWrite) refusedRecord(ctx context.Context, span []*item, err error) bool {
	w.in.dbHealth.ok(ctx) // it answered
	w.bo.Reset()
	if len(span) > 1 {
		w.queue = append(halves(span), w.queue[1:]...)
		return true
	}
	it := span[0]
	w.refused[it]++
	if w.refused[it] <= w.in.cfg.RecordRetries {
		w.in.logger.WarnContext(ctx, "database refused a record; retrying it",
			append(recordAttrs(it), "attempt", w.refused[it], "err", err)...)
		if w.refused[it] == 1 {
			w.refusedBo.Reset()
		}
		return backoff.Sleep(ctx, w.refusedBo.Next())
	}
	w.in.deadLetter(ctx, span, databaseReason(err, w.refused[it]))
	w.queue = w.queue[1:]
	return true
}

// failed: span failed as unavailable (an outage, a timeout, a lost
// connection). It is retried after a backoff that a probe reaching the
// database ends early, and split if it keeps failing while the database
// answers.
func (w *slowWrite) failed(ctx context.Context, span []*item, err error) bool {
	in := w.in
	if ctx.Err() != nil {
		return false
	}
	slow := in.slow(ctx, err)
	// A lone record that times out again is stuck, not slow (the outage
	// logs once, not per retry).
	stuck := slow && len(span) == 1 && w.unavailable+1 >= splitAfterFailures
	if slow && !stuck {
		// err tells whose bound it was: ours (a deadline) or the server's
		// statement_timeout.
		in.logger.WarnContext(ctx, "a write ran out of its time bound while the database answers; retrying",
			"records", len(span), "bound", in.onceTimeout(), "attempt", w.unavailable+1, "err", err)
	} else {
		in.dbHealth.fail(ctx, err)
	}
	// A failure while the database does not answer is the outage's, not
	// the span's: at a failover the span fails while the primary is gone
	// and once more as the standby takes over, and must not be split for
	// that. After a timeout slow has already pinged; ping only after
	// others.
	if slow || (!store.TimedOut(err) && in.pings(ctx)) {
		w.unavailable++
	} else {
		w.unavailable = 0
	}
	if len(span) > 1 && w.unavailable >= splitAfterFailures {
		in.logger.WarnContext(ctx, "the database answers but keeps failing a write; splitting it",
			"records", len(span), "attempts", w.unavailable, "err", err)
		w.queue = append(halves(span), w.queue[1:]...)
		w.unavailable = 0
		if store.TimedOut(err) {
			if w.tooBig == 0 || len(span) < w.tooBig {
				w.tooBig = len(span)
			}
			// New spans, not the same one failing: the descent to a size
			// that fits (or to a stuck lone record) must not wait out a
			// backoff grown at the sizes above.
			w.bo.Reset()
		}
	}
	// A probe that reaches the database again ends the wait.
	return in.dbHealth.sleep(ctx, w.bo.Next())
}

func halves(items []*item) [][]*item {
	mid := len(items) / 2
	return [][]*item{items[:mid:mid], items[mid:]}
}
