package ingest

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/tracing"
)

// Span names of the ingestor (issue 14.4): one per batch, linked to its
// records' input trace contexts (the first maxBatchLinks); one per record
// that came with a traceparent, as its child (the input's traceparent is
// the parent of the ingest span, and the events carry this span's context
// on); the database write as a child of the batch span, and the DLQ write
// as one of the batch span (contract errors) or of the write span (records
// the database refused, dead-lettered from the write).
const (
	spanBatch      = "ingest batch"
	spanRecord     = "ingest record"
	spanWrite      = "ingest write"
	spanDeadLetter = "ingest dead-letter"
)

// maxBatchLinks is how many of its records' input contexts a batch span
// links to: the SDK's default OTEL_SPAN_LINK_COUNT_LIMIT. Beyond it the SDK
// drops links and logs a warning for every such span, twice a second at
// 1,000 traced passports/s; each record's own span links to its batch
// whatever the number.
const maxBatchLinks = 128

// traceBatch opens the spans of b when tracing is on; it returns the batch
// span's context and a function that ends them all (records first).
func (in *Ingestor) traceBatch(ctx context.Context, b *batch) (context.Context, func()) {
	if in.cfg.Tracer == nil {
		return ctx, func() {}
	}
	var links []trace.Link
	var parents []context.Context // per item; nil: no valid traceparent
	for i, it := range b.items {
		rctx := tracing.Extract(context.Background(), it.rec())
		sc := trace.SpanContextFromContext(rctx)
		if !sc.IsValid() {
			continue
		}
		if parents == nil {
			parents = make([]context.Context, len(b.items))
		}
		parents[i] = rctx
		links = append(links, trace.Link{SpanContext: sc})
	}
	attrs := []attribute.KeyValue{attribute.Int("records", len(b.items))}
	if len(links) > maxBatchLinks {
		attrs = append(attrs, attribute.Int("links.omitted", len(links)-maxBatchLinks))
		links = links[:maxBatchLinks]
	}
	bctx, span := in.cfg.Tracer.Start(ctx, spanBatch, trace.WithLinks(links...), trace.WithAttributes(attrs...))
	batchLink := trace.LinkFromContext(bctx)
	for i, parent := range parents {
		if parent == nil {
			continue
		}
		rec := b.items[i].rec()
		_, b.items[i].span = in.cfg.Tracer.Start(parent, spanRecord, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithLinks(batchLink),
			trace.WithAttributes(
				attribute.String("messaging.destination.name", rec.Topic),
				attribute.Int("messaging.destination.partition.id", int(rec.Partition)),
				attribute.Int64("messaging.kafka.offset", rec.Offset),
			))
	}
	return bctx, func() {
		for _, it := range b.items {
			if it.span == nil {
				continue
			}
			switch {
			case it.cerr != nil:
				it.span.SetStatus(codes.Error, "contract violation; dead-lettered")
			case !it.done:
				it.span.SetStatus(codes.Error, "not finished; will be redelivered")
			}
			if it.acc.Passport != nil {
				it.span.SetAttributes(attribute.String("route_id", it.acc.Passport.RouteID))
			}
			it.span.End()
		}
		span.End()
	}
}

// startSpan opens a child span of ctx's when tracing is on; the returned
// span is a no-op otherwise.
func (in *Ingestor) startSpan(ctx context.Context, name string, records int) (context.Context, trace.Span) {
	if in.cfg.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return in.cfg.Tracer.Start(ctx, name, trace.WithAttributes(attribute.Int("records", records)))
}

// recordTraceparent is the traceparent of it's span ("" without one).
func recordTraceparent(it *item) string {
	if it.span == nil {
		return ""
	}
	return tracing.Traceparent(it.span)
}
