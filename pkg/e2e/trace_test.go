package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/testenv"
)

// TestTraceFollowsAPassportThroughBothBinaries: with OTEL_EXPORTER_OTLP_ENDPOINT
// set on both binaries, one passport whose input carries a traceparent
// produces spans from the ingestor and the relay in the input's trace, rooted
// at the input's span, and each output event's traceparent is one of those
// spans, so a consumer continues the same trace (contract §6).
func TestTraceFollowsAPassportThroughBothBinaries(t *testing.T) {
	otlp := testenv.NewOTLPReceiver(t)
	otel := func(service string) []string {
		return []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL,
			"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_SERVICE_NAME=" + service,
			"OTEL_BSP_SCHEDULE_DELAY=100",
		}
	}
	bins := BuildBinaries(t, t.TempDir())
	s := newStack(t, bins, "trace", stackOptions{IngestorEnv: otel("ingestor"), RelayEnv: otel("outbox-relay")})
	s.startBoth()

	const traceID, inputSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	value, err := os.ReadFile(filepath.Join("..", "..", "testdata", "contract", "valid-polygon.json"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Produce(t, s.bootstrap, s.topics.Input, testenv.Record{
		Value:   value,
		Headers: []testenv.Header{{Key: "traceparent", Value: []byte("00-" + traceID + "-" + inputSpan + "-01")}},
	})
	outs := append(testenv.Consume(t, s.bootstrap, s.topics.Processed, 1, time.Minute),
		testenv.Consume(t, s.bootstrap, s.topics.GeoRef, 1, time.Minute)...)

	var spans map[string]testenv.Span
	var services map[string]bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans, services = map[string]testenv.Span{}, map[string]bool{}
		for _, sp := range otlp.Spans() {
			if sp.TraceID == traceID {
				spans[sp.SpanID] = sp
				services[sp.Service] = true
			}
		}
		if services["ingestor"] && services["outbox-relay"] && len(spans) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !services["ingestor"] || !services["outbox-relay"] {
		t.Fatalf("spans of the input's trace came from %v, want both ingestor and outbox-relay (all spans: %v)", services, otlp.Spans())
	}
	// Every span of the trace leads, parent by parent, to the input's span.
	for id, sp := range spans {
		cur, hops := sp, 0
		for cur.Parent != inputSpan {
			next, ok := spans[cur.Parent]
			if !ok || hops > 10 {
				t.Errorf("span %s %q (%s) does not lead to the input's span %s (stuck at parent %q)", id, sp.Name, sp.Service, inputSpan, cur.Parent)
				break
			}
			cur, hops = next, hops+1
		}
	}
	for _, r := range outs {
		tp, ok := r.Header("traceparent")
		if !ok {
			t.Fatalf("output record %s/%d@%d has no traceparent", s.topics.Processed, r.Partition, r.Offset)
		}
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != traceID {
			t.Fatalf("output traceparent %q is not in the input's trace %s", tp, traceID)
		}
		sp, ok := spans[parts[2]]
		if !ok {
			t.Fatalf("output traceparent %q names span %s, which no binary exported", tp, parts[2])
		}
		if sp.Service != "outbox-relay" {
			t.Errorf("output traceparent names %q of %s, want the relay's publish span", sp.Name, sp.Service)
		}
	}
	t.Logf("trace %s: %d spans from ingestor and outbox-relay, outputs carry the relay's publish spans", traceID, len(spans))
}
