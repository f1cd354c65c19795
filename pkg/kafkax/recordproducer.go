package kafkax

import (
	"context"

	"github.com/pcp/route-processing/pkg/record"
)

// RecordProducer is a Producer whose ProduceBatch takes []record.Record.
//
// Transitional: the producer itself is moving to []record.Record (producer.go
// belongs to that change). Once it has, delete this file and pass the
// *Producer where a RecordProducer is used.
type RecordProducer struct{ *Producer }

// ProduceBatch converts recs and produces them; see Producer.ProduceBatch.
func (p RecordProducer) ProduceBatch(ctx context.Context, recs []record.Record) []error {
	msgs := make([]Message, len(recs))
	for i, r := range recs {
		var hs []Header
		if len(r.Headers) > 0 {
			hs = make([]Header, len(r.Headers))
			for j, h := range r.Headers {
				hs[j] = Header{Key: h.Key, Value: h.Value}
			}
		}
		msgs[i] = Message{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: hs}
	}
	return p.Producer.ProduceBatch(ctx, msgs)
}
