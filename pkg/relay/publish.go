package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

// isolateMax bounds the rows of a batch re-sent one by one after message
// errors; past it the failures are too many to be one bad neighbour.
const isolateMax = 20

// outcome of one row's publish.
type outcome int

const (
	delivered outcome = iota
	countAttempt
	giveBack
	unavailable
)

func classify(err error, ctxDone bool) outcome {
	switch {
	case err == nil:
		return delivered
	case errors.Is(err, record.ErrNotAttempted), errors.Is(err, context.Canceled),
		ctxDone && errors.Is(err, context.DeadlineExceeded):
		return giveBack
	case errors.Is(err, record.ErrUnavailable):
		return unavailable
	}
	return countAttempt
}

// batch is one claim on its way through publish and mark: the rows, the
// i-th row's error, and what is to become of each row.
type batch struct {
	rows  []outbox.Row
	errs  []error
	start time.Time // when the claim returned
	// leased is when the claim was sent: its lease (the database's now()
	// plus LockTimeout) began after it, so deadlines counted from it end
	// before the lease does, however long the claim took.
	leased time.Time
	spans  []trace.Span    // the i-th row's publish span; nil when never sent
	recs   []record.Record // the i-th row as sent (its traceparent the span's)

	ok, back  []outbox.Lease // to mark PUBLISHED; to give back
	failed    []int          // to charge an attempt
	rejected  []int          // refused by the cluster: failed, unless isolated
	unavail   []int          // the cluster's fault: postponed or given back
	postponed []int
}

// file files row i under its outcome.
func (b *batch) file(r *Relay, i int, err error, ctxDone bool) {
	b.errs[i] = err
	switch classify(err, ctxDone) {
	case delivered:
		r.lastDelivery.Store(time.Now().UnixNano())
		b.ok = append(b.ok, b.rows[i].Lease())
		age := (b.rows[i].AgeAtClaim + time.Since(b.start)).Seconds()
		r.m.ingestToPub.Observe(age)
		r.m.stage.WithLabelValues(stageCreatedToPublished).Observe(age)
	case giveBack:
		b.back = append(b.back, b.rows[i].Lease())
	case unavailable:
		b.unavail = append(b.unavail, i)
	default:
		b.rejected = append(b.rejected, i)
	}
}

// process publishes one batch, claimed at start by a claim sent at leased,
// and records what became of each row.
func (r *Relay) process(ctx context.Context, rows []outbox.Row, leased, start time.Time, claimSpan trace.SpanContext) {
	b := &batch{rows: rows, errs: make([]error, len(rows)), start: start, leased: leased, spans: make([]trace.Span, len(rows)),
		recs: make([]record.Record, len(rows))}
	// The publish may outlive ctx by the shutdown grace: work in flight when
	// the relay is stopped gets that long to finish.
	pubCtx, cancel := shutdownContext(ctx, r.cfg.ShutdownGrace)
	defer cancel()
	sent := time.Now()
	r.publish(pubCtx, b, claimSpan)
	reported := time.Since(b.start).Seconds()
	r.m.publishTime.Observe(time.Since(sent).Seconds())
	r.m.stage.WithLabelValues(stageBatchReported).Observe(reported)
	perRow := r.m.stage.WithLabelValues(stageClaimedToReported)
	for range b.rows {
		perRow.Observe(reported)
	}
	r.isolate(ctx, pubCtx, b)
	b.failed = append(b.failed, b.rejected...)
	r.judgeUnavailable(ctx, pubCtx, b)
	b.endSpans()
	r.settle(ctx, b)
}

// publish sends the rows whose headers decoded, in one batch. A row whose
// stored headers do not decode is its own fault: it is not sent, and the
// error counts as an attempt; its neighbours go on.
func (r *Relay) publish(ctx context.Context, b *batch, claimSpan trace.SpanContext) {
	send := make([]int, 0, len(b.rows))
	recs := make([]record.Record, 0, len(b.rows))
	for i := range b.rows {
		if b.rows[i].HeadersError != "" {
			b.errs[i] = errors.New(b.rows[i].HeadersError)
			b.failed = append(b.failed, i)
			continue
		}
		send = append(send, i)
		recs = append(recs, r.startPublish(ctx, b, i, claimSpan))
	}
	if len(send) == 0 {
		return
	}
	done := make(chan struct{})
	go r.watchStall(ctx, done)
	errs := r.pub.ProduceBatch(ctx, recs)
	close(done)
	ctxDone := ctx.Err() != nil
	for j, i := range send {
		b.file(r, i, errs[j], ctxDone)
	}
}

// watchStall probes the cluster every stallAfter while a batch's delivery
// reports do not come (until done): in a blackhole (packets dropped, a
// frozen broker) the reports would only time out after PublishTimeout, and
// the relay would look ready all that while. A probe that no broker answers
// enters outage mode at once (not ready, no new claims); the batch itself
// still ends by its timeout, its rows given back without an attempt.
func (r *Relay) watchStall(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(r.cfg.stallAfter())
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.kafkaDown.Load() {
			return
		}
		_ = r.confirmOutage(ctx, fmt.Errorf("no delivery report for %s: %w", r.cfg.stallAfter(), record.ErrUnavailable))
	}
}

// isolate re-sends each rejected row alone, once, when only a few were
// rejected: a broker refuses a whole produce batch for one bad record (e.g.
// over max.message.bytes), failing its innocent neighbours with the same
// error, and only the offender should be charged an attempt. No send
// starts after the last moment at which it can still end, and be marked,
// within the lease; the rows it leaves are charged (a batch that always
// runs out of time must still reach FAILED). A stop gives them back
// instead: another claim re-sends them, alone if the refusal repeats.
func (r *Relay) isolate(ctx, pubCtx context.Context, b *batch) {
	if len(b.rejected) <= 1 || len(b.rejected) > isolateMax {
		return
	}
	again := b.rejected
	b.rejected = nil
	stopAt := r.cfg.isolateDeadline(b.leased)
	for _, i := range again {
		switch {
		case ctx.Err() != nil:
			b.back = append(b.back, b.rows[i].Lease())
		case time.Now().After(stopAt):
			b.rejected = append(b.rejected, i)
		default:
			err := r.pub.ProduceBatch(pubCtx, []record.Record{b.recs[i]})[0]
			b.file(r, i, err, pubCtx.Err() != nil)
		}
	}
}

// judgeUnavailable decides what happens to rows the cluster could not take:
// given back when stopping or when no broker answers (outage mode), else
// postponed.
func (r *Relay) judgeUnavailable(ctx, pubCtx context.Context, b *batch) {
	if len(b.unavail) == 0 {
		return
	}
	// Stopping: give the rows back at once. A probe could take its whole
	// timeout (a metadata request ignores cancellation) out of the shutdown
	// budget, and decides nothing now.
	if ctx.Err() != nil || r.confirmOutage(pubCtx, b.errs[b.unavail[0]]) != nil {
		for _, i := range b.unavail {
			b.back = append(b.back, b.rows[i].Lease())
		}
		return
	}
	// A broker answers, but the cluster could not take these messages (a
	// partition without a leader, not enough in-sync replicas): still the
	// cluster's fault, not the rows'. Retry later with backoff, without
	// counting an attempt.
	b.postponed = b.unavail
	r.explainPostponed(pubCtx, b)
}

// partitionDescriber is what a Publisher may add (kafkax.Producer does):
// what the cluster's metadata shows of a topic's partitions.
type partitionDescriber interface {
	DescribePartitions(ctx context.Context, topic string, timeout time.Duration) (string, error)
}

// describeWait bounds the metadata request of explainPostponed. A broker
// has just answered the probe, so the answer takes milliseconds; on a link
// too slow for this the errors stay as they are.
const describeWait = time.Second

// explainPostponed adds to each postponed row's error what the cluster's
// metadata shows of its topic's partitions (a partition without a leader,
// replicas out of sync), one request per topic: librdkafka retries a
// refused produce until its timeout and then reports only "Message timed
// out", and last_error and the log should say what an operator can act
// on. When the publisher cannot describe, or the request fails, the errors
// stay as they are. It never takes the time the postpone's write has
// within the lease (markMargin, as settle's marks).
func (r *Relay) explainPostponed(ctx context.Context, b *batch) {
	d, ok := r.pub.(partitionDescriber)
	if !ok {
		return
	}
	writeBy := b.leased.Add(r.cfg.LockTimeout - markMargin)
	said := map[string]string{}
	for _, i := range b.postponed {
		topic := b.rows[i].Topic
		desc, asked := said[topic]
		if wait := min(describeWait, time.Until(writeBy)); !asked && wait > 0 {
			var err error
			if desc, err = d.DescribePartitions(ctx, topic, wait); err != nil {
				r.logger.DebugContext(ctx, "could not describe the partitions of a topic whose rows are postponed", "topic", topic, "err", err)
			}
			said[topic] = desc
		}
		if desc != "" {
			b.errs[i] = fmt.Errorf("%w; %s", b.errs[i], desc)
		}
	}
}

// shutdownContext returns a context that outlives ctx by grace.
func shutdownContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(c, func() { t.Stop() })
	})
	return c, func() { stop(); cancel() }
}
