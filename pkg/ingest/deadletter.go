package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
)

func contractReason(it *item) dlq.Reason {
	return dlq.Reason{
		FQCN:     dlq.FQCNContractViolation,
		Message:  it.cerr.Reason,
		Category: it.cerr.Category(),
		Field:    it.cerr.Field,
	}
}

// databaseReason is the reason of a record the database refused attempts
// times: the server's message and code (store.RefusalReason), never the
// data.
func databaseReason(err error, attempts int) func(*item) dlq.Reason {
	msg := fmt.Sprintf("database rejected the record after %d attempts", attempts)
	if r := store.RefusalReason(err); r != "" {
		msg += ": " + r
	}
	return func(*item) dlq.Reason {
		return dlq.Reason{FQCN: dlq.FQCNDatabaseRejection, Message: msg, Category: dlq.CategoryRetryable}
	}
}

// deadLetter copies items to the DLQ and marks each done once acknowledged.
// A failed write is retried with backoff (component "dlq" not ready
// meanwhile) until it succeeds or ctx ends: nothing is skipped.
func (in *Ingestor) deadLetter(ctx context.Context, items []*item, why func(*item) dlq.Reason) {
	in.dlqWriters.Add(1)
	defer in.dlqWriters.Add(-1)
	ctx, span := in.startSpan(ctx, spanDeadLetter, len(items))
	defer span.End()
	bo := backoff.New(in.cfg.MinBackoff, in.cfg.MaxBackoff)
	for {
		items = in.ownedItems(items)
		if len(items) == 0 {
			return
		}
		letters := make([]record.Record, len(items))
		reasons := make([]dlq.Reason, len(items))
		for i, it := range items {
			reasons[i] = why(it)
			letters[i] = dlq.Letter(in.cfg.DLQTopic, it.acc.Source, in.cfg.ConsumerGroup, reasons[i])
		}
		errs := in.produceLetters(ctx, items, letters)
		var failed []*item
		var firstErr error
		for i, err := range errs {
			if err != nil {
				failed = append(failed, items[i])
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			it, r := items[i], reasons[i]
			it.done = true
			in.metrics.failure.WithLabelValues(string(r.Category)).Inc()
			in.logger.WarnContext(ctx, "record dead-lettered",
				append(recordAttrs(it), "category", string(r.Category), "field", r.Field, "error_class", r.FQCN, "reason", r.Message)...)
		}
		if len(failed) == 0 {
			in.dlqHealth.ok(ctx)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !in.dlqHealth.outage.Load() {
			firstErr = in.explainDLQ(ctx, firstErr)
		}
		in.dlqHealth.fail(ctx, firstErr)
		items = failed
		// A probe that reaches the brokers again ends the wait.
		if !in.dlqHealth.sleep(ctx, bo.Next()) {
			return
		}
	}
}

// produceLetters sends the letters of items. A broker refuses a whole
// produce request for one oversized record, so its neighbours fail too:
// each refused record is sent again alone. One that is still refused would
// block its partition for good (nothing is skipped), so it is sent without
// its value (dlq.OmitValue), and if still refused (a large key or headers)
// without the original's key and headers too (dlq.OmitOriginal): the
// dead-letter headers still say where the original is, and the input
// topic keeps it for its retention.
func (in *Ingestor) produceLetters(ctx context.Context, items []*item, letters []record.Record) []error {
	// Not cut short (nil): a cancelled produce may land all the same.
	defer in.dlqHealth.calls.end(in.dlqHealth.calls.start(nil))
	errs := in.deadLetters.ProduceBatch(ctx, letters)
	for i, err := range errs {
		if !in.deadLetters.TooLarge(err) {
			continue
		}
		l := letters[i]
		if errs[i] = in.deadLetters.ProduceBatch(ctx, []record.Record{l})[0]; !in.deadLetters.TooLarge(errs[i]) {
			continue
		}
		if len(l.Value) > 0 {
			in.logger.WarnContext(ctx, "dead-letter record too large for the DLQ topic; sending it without its value",
				append(recordAttrs(items[i]), "err", errs[i])...)
			l = dlq.OmitValue(l)
			if errs[i] = in.deadLetters.ProduceBatch(ctx, []record.Record{l})[0]; !in.deadLetters.TooLarge(errs[i]) {
				continue
			}
		}
		if bare, ok := dlq.OmitOriginal(l); ok {
			in.logger.WarnContext(ctx, "dead-letter record too large for the DLQ topic without its value; sending it without its key and headers too",
				append(recordAttrs(items[i]), "key_bytes", len(l.Key), "headers", len(items[i].rec().Headers), "err", errs[i])...)
			errs[i] = in.deadLetters.ProduceBatch(ctx, []record.Record{bare})[0]
		}
	}
	return errs
}

// recordAttrs are the log attributes of a record: identifiers and sizes,
// never the payload.
func recordAttrs(it *item) []any {
	rec := it.rec()
	attrs := []any{
		slog.String("topic", rec.Topic),
		slog.Int("partition", int(rec.Partition)),
		slog.Int64("offset", rec.Offset),
		slog.Int("payload_bytes", len(rec.Value)),
	}
	if p := it.acc.Passport; p != nil {
		attrs = append(attrs, slog.String("route_id", p.RouteID))
		if p.TraceID != nil {
			attrs = append(attrs, slog.String("trace_id", obs.Ident(*p.TraceID)))
		}
		if p.CorrelationID != nil {
			attrs = append(attrs, slog.String("correlation_id", obs.Ident(*p.CorrelationID)))
		}
	}
	return attrs
}

// partitionDescriber is what a DLQ may add (kafkax.Producer does): what
// the cluster's metadata shows of a topic's partitions.
type partitionDescriber interface {
	DescribePartitions(ctx context.Context, topic string, timeout time.Duration) (string, error)
}

// describeWait bounds explainDLQ's metadata request, and so the delay of
// the outage it explains. It runs only when the DLQ is not in an outage
// yet: a hung broker is flagged while the produce is still outstanding
// (the stall watch's probe fails), so what is left is mostly brokers that
// answer and could not take the letters, whose answer takes milliseconds.
const describeWait = time.Second

// explainDLQ adds to err, about to pause consumption, what the cluster's
// metadata shows of the DLQ topic when the cluster could not take the
// letters (record.ErrUnavailable): librdkafka retries a refused produce
// (no leader, not enough replicas) until its timeout and then reports only
// "Message timed out". When the DLQ cannot describe, or the request fails,
// err stays as it is.
func (in *Ingestor) explainDLQ(ctx context.Context, err error) error {
	d, ok := in.deadLetters.(partitionDescriber)
	if !ok || !errors.Is(err, record.ErrUnavailable) {
		return err
	}
	desc, derr := d.DescribePartitions(ctx, in.cfg.DLQTopic, describeWait)
	if derr != nil {
		in.logger.DebugContext(ctx, "could not describe the DLQ topic's partitions", "topic", in.cfg.DLQTopic, "err", derr)
		return err
	}
	return fmt.Errorf("%w; %s", err, desc)
}

// dlqSymptom is the DLQ's /readyz reason: the topic, named, when the
// brokers answer without it (a *record.TopicError), else "unavailable".
func dlqSymptom(err error) string {
	var topicErr *record.TopicError
	if errors.As(err, &topicErr) {
		return topicErr.Error()
	}
	return "unavailable"
}

// probeDLQ asks the DLQ's brokers for the topic's metadata, within ctx's
// deadline (the health's patience).
func (in *Ingestor) probeDLQ(ctx context.Context) error {
	return in.deadLetters.Probe(ctx, in.cfg.DLQTopic, probeWaitMax)
}
