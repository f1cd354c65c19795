// Package adapters fits the concrete clients (kafkax, store) to the small
// interfaces that package ingest declares, so that ingest depends on neither
// confluent-kafka-go nor pgx and its tests can fake any of them.
package adapters

import (
	"context"
	"strconv"
	"time"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
)

// Consumer adapts a *kafkax.Consumer to ingest.Consumer.
type Consumer struct{ C *kafkax.Consumer }

var _ ingest.Consumer = Consumer{}

// Subscribe implements ingest.Consumer.
func (a Consumer) Subscribe(assigned func([]int32), revoked func([]int32, bool)) error {
	return a.C.Subscribe(kafkax.RebalanceFuncs{Assigned: assigned, Revoked: revoked})
}

// Poll implements ingest.Consumer.
func (a Consumer) Poll(timeout time.Duration) (*ingest.Record, error) {
	r, err := a.C.Poll(timeout)
	if r == nil || err != nil {
		return nil, err
	}
	var hs []ingest.Header
	if len(r.Headers) > 0 {
		hs = make([]ingest.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = ingest.Header{Key: h.Key, Value: h.Value}
		}
	}
	return &ingest.Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, Headers: hs,
		Timestamp: r.Timestamp, TimestampType: r.TimestampType,
	}, nil
}

// Pause implements ingest.Consumer.
func (a Consumer) Pause(partitions []int32) error { return a.C.Pause(partitions) }

// Resume implements ingest.Consumer.
func (a Consumer) Resume(partitions []int32) error { return a.C.Resume(partitions) }

// Commit implements ingest.Consumer.
func (a Consumer) Commit(offsets map[int32]int64) error { return a.C.Commit(offsets) }

// HighWatermark implements ingest.Consumer.
func (a Consumer) HighWatermark(partition int32) (int64, bool) {
	return a.C.HighWatermark(partition)
}

// DLQ adapts a *kafkax.Producer to ingest.DLQ, writing to Topic.
type DLQ struct {
	P     *kafkax.Producer
	Topic string
}

var _ ingest.DLQ = DLQ{}

// Produce implements ingest.DLQ.
func (a DLQ) Produce(ctx context.Context, msgs []ingest.DLQMessage) []error {
	out := make([]record.Record, len(msgs))
	for i, m := range msgs {
		hs := make([]record.Header, len(m.Headers))
		for j, h := range m.Headers {
			hs[j] = record.Header{Key: h.Key, Value: h.Value}
		}
		out[i] = record.Record{Topic: a.Topic, Key: m.Key, Value: m.Value, Headers: hs}
	}
	errs := a.P.ProduceBatch(ctx, out)
	// A broker refuses a whole produce request for one oversized record, so
	// its neighbours fail too: send each refused record alone. One that is
	// still refused would block its partition for good (nothing is
	// skipped), so it is dead-lettered without its value: the headers still
	// say where the original is, and the input topic keeps it for its
	// retention.
	for i, err := range errs {
		if !kafkax.IsMessageTooLarge(err) {
			continue
		}
		m := out[i]
		if errs[i] = a.P.ProduceBatch(ctx, []record.Record{m})[0]; !kafkax.IsMessageTooLarge(errs[i]) || len(m.Value) == 0 {
			continue
		}
		m.Headers = append(append([]record.Header(nil), m.Headers...),
			record.Header{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(m.Value)))})
		m.Value = nil
		errs[i] = a.P.ProduceBatch(ctx, []record.Record{m})[0]
	}
	return errs
}

// HeaderValueOmitted is set, to the original value's size in bytes, on a
// DLQ record whose value the DLQ topic refused as too large.
const HeaderValueOmitted = "pcp-dlq-value-omitted-bytes"

// Store adapts a *store.Passports to ingest.Store.
type Store struct{ S *store.Passports }

var _ ingest.Store = Store{}

// Begin implements ingest.Store.
func (a Store) Begin(ctx context.Context) (ingest.WriteTx, error) {
	tx, err := a.S.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// Ping implements ingest.Store.
func (a Store) Ping(ctx context.Context) error { return a.S.Ping(ctx) }
