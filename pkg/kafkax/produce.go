package kafkax

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/record"
)

// ProduceBatch sends every record (Topic, Key, Value, Headers, and
// Partition when Pinned; the rest is ignored), then waits for every
// delivery report. The i-th error is nil when recs[i] was acknowledged by
// all in-sync replicas; otherwise it wraps
// [record.ErrNotAttempted] or [record.ErrUnavailable] when the fault is not
// the record's (see [classify]). When ctx ends first, the records not yet
// reported get ctx's error (wrapping record.ErrNotAttempted); they may still
// be delivered later (at least once).
func (pr *Producer) ProduceBatch(ctx context.Context, recs []record.Record) []error {
	errs := pr.produceBatch(ctx, recs)
	for i, err := range errs {
		errs[i] = classify(ctx, err)
	}
	return errs
}

func (pr *Producer) produceBatch(ctx context.Context, msgs []record.Record) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	c, err := pr.client()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer c.release()
	p := c.p

	// Buffered for the whole batch, so librdkafka's delivery thread never
	// blocks on us even if we stop waiting.
	reports := make(chan kafka.Event, len(msgs))
	pending := 0
	for i := range msgs {
		m := &msgs[i]
		topic := m.Topic
		partition := kafka.PartitionAny
		if m.Pinned {
			partition = m.Partition
		}
		km := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition},
			Key:            m.Key,
			Value:          m.Value,
			Headers:        recordHeaders(m.Headers),
			Opaque:         i,
		}
		if err := produceRetryingQueueFull(ctx, p, km, reports); err != nil {
			errs[i] = err
			continue
		}
		pending++
	}

	// librdkafka's own timeout (message.timeout.ms) bounds each delivery;
	// the margin covers report hand-off.
	timer := time.NewTimer(pr.cfg.DeliveryTimeout + reportMargin(pr.cfg.DeliveryTimeout))
	defer timer.Stop()
	waiting := make([]bool, len(msgs))
	for i := range msgs {
		waiting[i] = errs[i] == nil
	}
	for pending > 0 {
		select {
		case ev := <-reports:
			km, ok := ev.(*kafka.Message)
			if !ok {
				continue
			}
			i := km.Opaque.(int)
			if waiting[i] {
				waiting[i] = false
				pending--
				errs[i] = km.TopicPartition.Error
				if errs[i] == nil && !c.delivered.Load() {
					c.delivered.Store(true) // before a concurrent call may drop c
				}
			}
		case <-ctx.Done():
			return fillWaiting(errs, waiting, ctx.Err())
		case <-timer.C:
			return fillWaiting(errs, waiting, fmt.Errorf("no delivery report within %s: %w", pr.cfg.DeliveryTimeout, errTimeout))
		}
	}
	// The records of the request that made the client fatal carry the
	// broker's code (OUT_OF_ORDER_SEQUENCE_NUMBER, say) without the fatal
	// flag (the rest come back purged: not attempted). The code is the
	// producer's state, not the record's: such a record gets the client's
	// fatal error (not attempted), and the client is replaced. A record
	// refused for what it is (too large, an unknown topic) keeps its error.
	if ferr := p.GetFatalError(); ferr != nil {
		for i, e := range errs {
			if producerStateError(e) {
				errs[i] = fmt.Errorf("%w (this record: %v)", ferr, e)
			}
		}
		pr.reset(c, ferr)
	}
	return errs
}

func recordHeaders(hs []record.Header) []kafka.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]kafka.Header, len(hs))
	for i, h := range hs {
		out[i] = kafka.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

func fillWaiting(errs []error, waiting []bool, err error) []error {
	for i, w := range waiting {
		if w {
			errs[i] = err
		}
	}
	return errs
}

func produceRetryingQueueFull(ctx context.Context, p *kafka.Producer, km *kafka.Message, reports chan kafka.Event) error {
	for {
		err := p.Produce(km, reports)
		var kerr kafka.Error
		if err == nil || !errors.As(err, &kerr) || kerr.Code() != kafka.ErrQueueFull {
			if err != nil {
				return fmt.Errorf("produce to %s: %w", *km.TopicPartition.Topic, err)
			}
			return nil
		}
		// The local queue is full: let librdkafka drain it.
		if !backoff.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// reportMargin is how long ProduceBatch waits for delivery reports beyond
// message.timeout.ms, which librdkafka enforces only approximately:
// record.ReportMargin, or half the timeout when that is shorter (short
// timeouts in tests), but at least 100 ms.
func reportMargin(deliveryTimeout time.Duration) time.Duration {
	return min(record.ReportMargin, max(deliveryTimeout/2, 100*time.Millisecond))
}
