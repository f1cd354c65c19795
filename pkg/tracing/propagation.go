package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

var traceContext propagation.TraceContext

// Extract returns ctx with the remote span context of the record's last
// traceparent header, if it has a valid one.
func Extract(ctx context.Context, rec *record.Record) context.Context {
	v, ok := rec.Header(outbox.HeaderTraceparent)
	if !ok {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{outbox.HeaderTraceparent: string(v)})
}

// ExtractTraceparent returns ctx with the remote span context of a stored
// traceparent value (an outbox row's), if it is valid.
func ExtractTraceparent(ctx context.Context, traceparent string) context.Context {
	return traceContext.Extract(ctx, propagation.MapCarrier{outbox.HeaderTraceparent: traceparent})
}

// Traceparent renders the span context of span as a traceparent value; ""
// when the span context is not valid (tracing off and no remote parent).
func Traceparent(span trace.Span) string {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c[outbox.HeaderTraceparent]
}
