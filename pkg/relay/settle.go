package relay

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/outbox"
)

// settle writes what became of a batch's rows: PUBLISHED, an attempt
// counted, postponed, or the lease given back. Marks must land even while
// the relay is stopping (a published row left PENDING is published again
// after its lease expires), so they run on a context that outlives ctx by
// markMargin, and give up when the lease ends.
func (r *Relay) settle(ctx context.Context, b *batch) {
	markCtx, cancel := shutdownContext(ctx, markMargin)
	defer cancel()
	deadline := b.leased.Add(r.cfg.LockTimeout)
	if len(b.ok) > 0 {
		r.retryDB(markCtx, deadline, "mark published", func(c context.Context) error {
			n, err := r.outbox.MarkPublished(c, b.ok)
			if err == nil {
				r.m.published.Add(float64(n))
				if lost := int64(len(b.ok)) - n; lost > 0 {
					r.m.lostLeaseRows.Add(float64(lost))
					r.logger.WarnContext(ctx, "leases taken over before the mark; rows will be published again by their new holder", "rows", lost)
				}
			}
			return err
		})
	}
	if len(b.failed) > 0 {
		r.recordFailures(markCtx, deadline, b)
	}
	if len(b.postponed) > 0 {
		r.postpone(markCtx, deadline, b)
	}
	if len(b.back) > 0 {
		r.retryDB(markCtx, deadline, "release leases", func(c context.Context) error {
			n, err := r.outbox.Release(c, b.back)
			if err == nil {
				r.m.released.Add(float64(n))
			}
			return err
		})
	}
}

// retries builds the outbox retries of rows idx, each with its backoff.
func (r *Relay) retries(b *batch, idx []int) []outbox.Retry {
	out := make([]outbox.Retry, len(idx))
	for j, i := range idx {
		row := &b.rows[i]
		out[j] = outbox.Retry{
			ID:    row.ID,
			Token: row.Token,
			Error: truncate(b.errs[i].Error(), 1000),
			Delay: r.retryDelay(row),
		}
	}
	return out
}

// retryDelay is the backoff before a row's next try (contract §5).
func (r *Relay) retryDelay(row *outbox.Row) time.Duration {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return Backoff(row.Attempts+1, r.cfg.InitialBackoff, r.cfg.MaxBackoff, r.cfg.Jitter, r.rng.Float64())
}

func (r *Relay) recordFailures(ctx context.Context, deadline time.Time, b *batch) {
	retries := r.retries(b, b.failed)
	byID := make(map[uuid.UUID]int, len(b.failed))
	for _, i := range b.failed {
		byID[b.rows[i].ID] = i
	}
	r.retryDB(ctx, deadline, "reschedule failed rows", func(c context.Context) error {
		res, err := r.outbox.Retry(c, retries, r.cfg.MaxAttempts)
		if err != nil {
			return err
		}
		// One line per kind of failure in the batch, not per row: a cause
		// common to a topic (an ACL, max.message.bytes) fails every row of
		// every batch, and a line each wrote 72 MB in 20 s for 100,000 rows.
		groups := map[failureKey]*failureGroup{}
		var order []failureKey
		for _, rr := range res {
			i := byID[rr.ID]
			row := &b.rows[i]
			if rr.Status == outbox.StatusFailed {
				r.m.failed.Inc()
			} else {
				r.m.retried.Inc()
			}
			k := failureKey{status: rr.Status, topic: row.Topic, err: b.errs[i].Error()}
			g := groups[k]
			if g == nil {
				g = &failureGroup{firstID: rr.ID, firstKey: row.Key, nextAt: rr.NextAttemptAt}
				groups[k] = g
				order = append(order, k)
			}
			g.rows++
			g.maxAttempts = max(g.maxAttempts, rr.Attempts)
			if rr.NextAttemptAt.Before(g.nextAt) {
				g.nextAt = rr.NextAttemptAt
			}
		}
		for _, k := range order {
			g := groups[k]
			attrs := []any{"rows", g.rows, "topic", k.topic, "outbox_id", g.firstID, "key", obs.Ident(g.firstKey),
				"attempts", g.maxAttempts, "err", k.err}
			if k.status == outbox.StatusFailed {
				r.logger.ErrorContext(ctx, "outbox rows failed for good; requeue them with `outbox-relay requeue`", attrs...)
			} else {
				r.logger.WarnContext(ctx, "publish failed; will retry", append(attrs, "next_attempt_at", g.nextAt)...)
			}
		}
		return nil
	})
}

// failureKey groups a batch's failed rows for the log: what became of them,
// where they were going and why.
type failureKey struct {
	status, topic, err string
}

// failureGroup is what the log says of one group: how many rows, the first
// row's id and key (to look it up), the most attempts and the earliest
// next try.
type failureGroup struct {
	rows, maxAttempts int
	firstID           uuid.UUID
	firstKey          string
	nextAt            time.Time
}

// postpone reschedules rows the cluster could not take, with backoff and
// last_error, without counting an attempt.
func (r *Relay) postpone(ctx context.Context, deadline time.Time, b *batch) {
	retries := r.retries(b, b.postponed)
	topics := map[string]int{}
	for _, i := range b.postponed {
		topics[b.rows[i].Topic]++
	}
	r.retryDB(ctx, deadline, "postpone rows", func(c context.Context) error {
		n, err := r.outbox.Postpone(c, retries)
		if err == nil {
			r.m.postponed.Add(float64(n))
			r.logger.WarnContext(ctx, "kafka answers but could not take these rows (no leader, not enough replicas?); retrying later without counting an attempt",
				"rows", n, "rows_by_topic", topics, "err", b.errs[b.postponed[0]])
		}
		return err
	})
}

// retryDB runs fn, each call bounded by writeCall, until it succeeds, ctx
// ends or the lease deadline passes (after which the rows belong to whoever
// claims them next anyway).
//
// It logs the first failure and the outcome, not every retry: during an
// outage a retry comes every ProbeMaxBackoff until the lease ends.
func (r *Relay) retryDB(ctx context.Context, deadline time.Time, op string, fn func(context.Context) error) {
	bo := r.cfg.dbRetryBackoff()
	for retries := 0; ; retries++ {
		c, cancel := r.writeCall(ctx, deadline)
		stop := r.watchCall(ctx, op, nil)
		err := fn(c)
		stop()
		cancel()
		if err == nil {
			if retries > 0 {
				r.logger.InfoContext(ctx, "database write succeeded after retries", "op", op, "retries", retries)
			}
			return
		}
		wait := bo.Next()
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			r.logger.ErrorContext(ctx, "giving up; the leases will expire and the rows be claimed again", "op", op, "err", err, "retries", retries)
			return
		}
		r.dbFailed("", err)
		if retries == 0 {
			r.logger.WarnContext(ctx, "database write failed; retrying until it succeeds or the lease ends", "op", op, "err", err, "lease_ends_in", time.Until(deadline).Round(time.Millisecond))
		} else {
			r.logger.DebugContext(ctx, "database write failed again", "op", op, "err", err, "retry_in", wait)
		}
		backoff.Sleep(ctx, wait)
	}
}

// truncate bounds an error stored in last_error, keeping valid UTF-8
// (PostgreSQL rejects anything else in text).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
