package relay

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/outbox"
)

// worker claims, publishes and marks batches until ctx ends. It claims
// nothing while Kafka is down (the prober wakes it) and, while PostgreSQL
// cannot be reached, retries the claim (its probe: the claim itself, with
// any remembered give-backs' statements, bounded by DBTimeout, doubled per
// claim that timed out while the database answered probes; see claimCall;
// the watermark is not refreshed meanwhile, see refreshWatermark) with a
// backoff capped at ProbeMaxBackoff.
func (r *Relay) worker(ctx context.Context, id int, slot *wakeSlot) {
	log := r.logger.With("worker", id)
	dbWait := r.cfg.dbRetryBackoff()
	var (
		polled    bool      // the last sleep ended by the poll timer
		woke      time.Time // when the last sleep ended by a wake
		prevClaim = time.Now()
	)
	var slept time.Time // when the last sleep began
	idle := func() {
		slept = time.Now()
		polled = !slot.sleep(ctx, r.cfg.PollInterval)
		if !polled {
			woke = time.Now()
		}
	}
	for ctx.Err() == nil {
		if r.kafkaDown.Load() {
			slot.sleep(ctx, r.cfg.PollInterval)
			continue
		}
		rows, more, sent, claimSpan, err := r.claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := dbWait.Next()
			if !r.dbOutageLogged.Swap(true) {
				log.ErrorContext(ctx, "cannot claim outbox rows; retrying", "err", err, "retry_in", wait)
			}
			r.dbFailed("", err)
			backoff.Sleep(ctx, wait)
			continue
		}
		claimed := time.Now()
		dbWait.Reset()
		r.dbPatience.Worked(claimed.Sub(sent))
		if !r.claimsHealthy.Load() {
			r.claimsHealthy.Store(true)
			if r.dbOutageLogged.Swap(false) {
				log.InfoContext(ctx, "database reachable again")
			}
			r.setDBReady("", nil)
		}
		if polled {
			r.notePoll(ctx, prevClaim, claimed, rows)
		} else if n := r.lastNotify.Load(); !woke.IsZero() && len(rows) > 0 && n >= slept.UnixNano() && n <= claimed.UnixNano() {
			// From the NOTIFY that came while the worker slept: other
			// wakes (a peer's under a backlog, a resume, Kafka back) are
			// not this stage.
			r.m.stage.WithLabelValues(stageNotifyToClaimed).Observe(claimed.Sub(time.Unix(0, n)).Seconds())
		}
		polled, woke, prevClaim = false, time.Time{}, claimed
		if len(rows) == 0 {
			idle()
			continue
		}
		backlog := more || len(rows) >= r.cfg.BatchSize
		if backlog {
			r.wakeOne() // another worker may help
		}
		r.m.claimedRows.Observe(float64(len(rows)))
		created := r.m.stage.WithLabelValues(stageCreatedToClaimed)
		for i := range rows {
			created.Observe(rows[i].AgeAtClaim.Seconds())
		}
		r.process(ctx, rows, sent, claimed, claimSpan)
		if !backlog {
			idle()
		}
	}
}

// claim runs one claim, bounded by claimCall and watched by watchCall (the
// claim watermark refreshed first when due, under a bound of its own), in
// its own span (a root span: a claim serves many traces; each row's publish
// span links to it). sent is when the claim statement was sent, after the
// watermark's refresh.
func (r *Relay) claim(ctx context.Context) (rows []outbox.Row, more bool, sent time.Time, _ trace.SpanContext, err error) {
	r.refreshWatermark(ctx)
	ctx, span := r.tracer.Start(ctx, "outbox claim", trace.WithNewRoot())
	defer span.End()
	c, cancel := r.claimCall(ctx)
	defer cancel()
	stop := r.watchCall(ctx, "claim", cancel)
	sent = time.Now()
	rows, more, err = r.outbox.Claim(c, r.cfg.BatchSize, r.cfg.MaxClaimBytes, r.cfg.LockTimeout)
	answered := stop()
	switch {
	case err == nil:
		r.claimsTimedOut.Store(0)
	case answered && errors.Is(c.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		// Slow, not lost: the database answered a probe meanwhile. A
		// claim lost in a blackhole ties with the probe that fails it
		// (both end DBTimeout in) and must not lengthen the next one.
		r.claimsTimedOut.Add(1)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "claim failed")
		return nil, false, sent, span.SpanContext(), err
	}
	span.SetAttributes(attribute.Int("outbox.rows", len(rows)), attribute.Bool("outbox.more", more))
	return rows, more, sent, span.SpanContext(), nil
}
