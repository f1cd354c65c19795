package ingest

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
)

// A batch of more traced records than the SDK keeps links on a span links
// its span to the first maxBatchLinks and says how many it left out, so the
// SDK drops none (it would log a warning per batch); every record still
// gets its span.
func TestBatchSpanLinksNoMoreThanTheSDKKeeps(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	in := &Ingestor{cfg: Config{Tracer: tp.Tracer("test")}}
	const n = 300
	b := &batch{}
	for i := range n {
		tp := fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319c-%016x-01", i+1)
		b.items = append(b.items, &item{acc: passport.Accepted{Source: record.Record{Headers: []record.Header{{Key: "traceparent", Value: []byte(tp)}}}}})
	}
	_, end := in.traceBatch(context.Background(), b)
	end()
	var batchSpans, recordSpans int
	for _, s := range rec.Ended() {
		switch s.Name() {
		case spanBatch:
			batchSpans++
			if len(s.Links()) != maxBatchLinks || s.DroppedLinks() != 0 {
				t.Errorf("batch span: %d links, %d dropped by the SDK; want %d, 0", len(s.Links()), s.DroppedLinks(), maxBatchLinks)
			}
			omitted := -1
			for _, kv := range s.Attributes() {
				if kv.Key == "links.omitted" {
					omitted = int(kv.Value.AsInt64())
				}
			}
			if omitted != n-maxBatchLinks {
				t.Errorf("links.omitted = %d, want %d", omitted, n-maxBatchLinks)
			}
		case spanRecord:
			recordSpans++
		}
	}
	if batchSpans != 1 || recordSpans != n {
		t.Errorf("%d batch and %d record spans, want 1 and %d", batchSpans, recordSpans, n)
	}
}
