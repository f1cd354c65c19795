package tracing

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestExportIsOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	p, err := New(context.Background(), discard(), "svc", "test")
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled {
		t.Fatal("tracing is enabled with no OTLP endpoint set")
	}
	_, span := p.Tracer("t").Start(context.Background(), "s")
	if span.SpanContext().IsValid() {
		t.Fatal("a span of the disabled provider has a valid context")
	}
}

func TestNoneExporterTurnsExportOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	p, err := New(context.Background(), discard(), "svc", "test")
	if err != nil || p.Enabled {
		t.Fatalf("New = %+v, %v; want disabled, no error", p, err)
	}
}

func TestAnUnknownProtocolNamesTheVariable(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/xml")
	_, err := New(context.Background(), discard(), "svc", "test")
	var te *Error
	if !errors.As(err, &te) || te.Var != "OTEL_EXPORTER_OTLP_PROTOCOL" {
		t.Fatalf("New error = %v, want a tracing.Error naming OTEL_EXPORTER_OTLP_PROTOCOL", err)
	}
}

// http/json, which the specification and the HTTP exporter support, sends
// the spans as JSON.
func TestHTTPJSONSendsJSON(t *testing.T) {
	got := make(chan string, 1)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type"):
		default:
		}
	}))
	defer collector.Close()
	exportOn(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if err := exportOneSpan(t, discard()); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces application/json" {
			t.Fatalf("the collector got %q, want POST /v1/traces application/json", req)
		}
	default:
		t.Fatal("no export reached the collector")
	}
}

// TestSpansReachARealOTLPHTTPEndpointUnderTheInputsTrace serves the OTLP/HTTP
// trace endpoint and checks that a span parented by a record's traceparent
// arrives there in the input's trace, with the service name from
// OTEL_SERVICE_NAME.
func TestSpansReachARealOTLPHTTPEndpointUnderTheInputsTrace(t *testing.T) {
	otlp := testenv.NewOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "ingestor-under-test")

	p, err := New(context.Background(), discard(), "default-name", "test")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enabled {
		t.Fatal("tracing is off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	rec := record.Record{Headers: []record.Header{{Key: "traceparent", Value: []byte(parent)}}}
	_, span := p.Tracer("t").Start(Extract(context.Background(), &rec), "ingest batch")
	tp := Traceparent(span)
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	if len(tp) != 55 || tp[3:35] != "0af7651916cd43dd8448eb211c80319c" || tp[36:52] == "b7ad6b7169203331" {
		t.Fatalf("Traceparent = %q: want the input's trace id with a span id of its own", tp)
	}
	var found bool
	for _, sp := range otlp.Spans() {
		if sp.Name != "ingest batch" {
			continue
		}
		found = true
		if sp.Service != "ingestor-under-test" {
			t.Errorf("service.name = %q, want OTEL_SERVICE_NAME's ingestor-under-test", sp.Service)
		}
		if sp.Parent != "b7ad6b7169203331" {
			t.Errorf("parent span id = %s, want the input's b7ad6b7169203331", sp.Parent)
		}
		if sp.TraceID != "0af7651916cd43dd8448eb211c80319c" {
			t.Errorf("trace id = %s, want the input's", sp.TraceID)
		}
	}
	if !found {
		t.Fatalf("the span did not arrive at the OTLP endpoint (%d spans)", len(otlp.Spans()))
	}
}

func TestExtractIgnoresAMalformedTraceparent(t *testing.T) {
	rec := record.Record{Headers: []record.Header{{Key: "traceparent", Value: []byte("not-a-traceparent")}}}
	p, err := New(context.Background(), discard(), "svc", "test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("t").Start(Extract(context.Background(), &rec), "s")
	if Traceparent(span) != "" {
		t.Fatalf("a malformed traceparent produced a span context: %q", Traceparent(span))
	}
}
