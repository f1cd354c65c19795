package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/testenv"
	"github.com/pcp/route-processing/pkg/tracing"
)

// With tracing on, a record with a traceparent yields spans in the input's
// trace: the per-record span is the input span's child, the batch links to
// it, the database write is the batch's child, and the outbox rows carry
// the per-record span's context; a record without one yields no
// traceparent on its events; an invalid one is dead-lettered under a span.
func TestTracingFollowsTheInputsTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := b.start(t, func(c *ingest.Config) { c.Tracer = tp.Tracer("test") })

	const input = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	inputSC := trace.SpanContextFromContext(tracing.ExtractTraceparent(context.Background(), input))
	recs, ids := validRecords(t, 2)
	recs[0].Headers = []testenv.Header{{Key: "traceparent", Value: []byte(input)}}
	bad := testenv.Record{Key: []byte("bad"), Value: []byte("{"), Headers: []testenv.Header{{Key: "traceparent", Value: []byte(input)}}}
	all := testenv.Produce(t, b.bootstrap, b.topic, append(recs, bad)...)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.NoError(t, r.stop(t))

	ctx := context.Background()
	headerOf := func(routeID string) []string {
		rows, err := b.pool.Query(ctx, "select coalesce(headers->>'traceparent', '') from route_passport_outbox where route_id = $1", routeID)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}

	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	require.Len(t, byName["ingest record"], 2, "one span per record with a traceparent (the valid and the invalid one)")
	var recordSpan sdktrace.ReadOnlySpan
	for _, s := range byName["ingest record"] {
		require.Equal(t, inputSC.TraceID(), s.SpanContext().TraceID(), "record span in the input's trace")
		require.Equal(t, inputSC.SpanID(), s.Parent().SpanID(), "the input's traceparent is the record span's parent")
		for _, kv := range s.Attributes() {
			if kv.Key == "route_id" && kv.Value.AsString() == ids[0] {
				recordSpan = s
			}
		}
	}
	require.NotNil(t, recordSpan, "the valid record's span names its route")

	tps := headerOf(ids[0])
	require.Len(t, tps, 2)
	for _, v := range tps {
		sc := trace.SpanContextFromContext(tracing.ExtractTraceparent(ctx, v))
		require.True(t, sc.IsValid(), "outbox traceparent %q parses", v)
		require.Equal(t, inputSC.TraceID(), sc.TraceID(), "outbox traceparent in the input's trace")
		require.Equal(t, recordSpan.SpanContext().SpanID(), sc.SpanID(), "outbox traceparent is the record span")
	}
	require.Equal(t, []string{"", ""}, headerOf(ids[1]), "no traceparent in, none out")

	var linked sdktrace.ReadOnlySpan
	for _, s := range byName["ingest batch"] {
		for _, l := range s.Links() {
			if l.SpanContext.SpanID() == inputSC.SpanID() && l.SpanContext.TraceID() == inputSC.TraceID() {
				linked = s
			}
		}
	}
	require.NotNil(t, linked, "a batch span links to the input's trace context")
	var writeChild, dlqChild bool
	for _, s := range byName["ingest write"] {
		writeChild = writeChild || s.Parent().SpanID() == linked.SpanContext().SpanID()
	}
	for _, s := range byName["ingest dead-letter"] {
		dlqChild = dlqChild || s.Parent().SpanID() == linked.SpanContext().SpanID()
	}
	require.True(t, writeChild, "the database write is a child of the batch span")
	require.True(t, dlqChild, "the DLQ write is a child of the batch span")
	require.Len(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), 1)
}
