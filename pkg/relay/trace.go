package relay

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/tracing"
)

// startPublish starts row i's publish span and returns the record to send.
// The span is a child of the row's stored traceparent (the input's, or the
// ingest span's) when it has one, and links to the claim. With tracing on,
// the record's traceparent becomes the publish span's, so consumers
// continue the same trace from this span; with tracing off (or a row
// without traceparent) the headers go out as stored.
func (r *Relay) startPublish(ctx context.Context, b *batch, i int, claim trace.SpanContext) record.Record {
	row := &b.rows[i]
	rec := row.Record()
	tp, hasTP := "", false
	for _, h := range row.Headers {
		if h.Key == outbox.HeaderTraceparent {
			tp, hasTP = string(h.Value), true
		}
	}
	parent := ctx
	if hasTP {
		parent = tracing.ExtractTraceparent(ctx, tp)
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("route_id", row.RouteID.String()),
			attribute.String("event_type", row.EventType),
			attribute.String("topic", row.Topic),
			attribute.String("outbox_id", row.ID.String()),
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", row.Topic),
		),
	}
	if claim.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: claim}))
	}
	_, span := r.tracer.Start(parent, "outbox publish", opts...)
	b.spans[i] = span
	if r.cfg.Tracer != nil && hasTP {
		if own := tracing.Traceparent(span); own != "" {
			rec.Headers = withHeader(rec.Headers, outbox.HeaderTraceparent, own)
		}
	}
	b.recs[i] = rec
	return rec
}

// withHeader returns a copy of hs with every key header's value set to v
// (the row's headers are shared with the batch; they are not changed).
func withHeader(hs []record.Header, key, v string) []record.Header {
	out := slices.Clone(hs)
	for j := range out {
		if out[j].Key == key {
			out[j].Value = []byte(v)
		}
	}
	return out
}

// endSpans ends every publish span with the row's outcome.
func (b *batch) endSpans() {
	for i, span := range b.spans {
		if span == nil {
			continue
		}
		if err := b.errs[i]; err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "not delivered")
		}
		span.End()
	}
}
