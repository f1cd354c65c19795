package tracing

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/pcp/route-processing/pkg/testenv"
)

// jsonLines parses what a JSON slog handler wrote, failing on any line
// that is not JSON (the SDK's own stderr format would be one).
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestExportErrorsAreLoggedThroughSlog points export at a collector that
// refuses every batch, with a credential header that does reach it.
func TestExportErrorsAreLoggedThroughSlog(t *testing.T) {
	var (
		mu   sync.Mutex
		auth []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "refused", http.StatusBadRequest)
	}))
	defer collector.Close()
	exportOn(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20"+secret)
	var out testenv.SyncBuffer

	_ = exportOneSpan(t, slog.New(slog.NewJSONHandler(&out, nil))) // the final batch's failure goes to the error handler

	mu.Lock()
	if len(auth) == 0 || auth[0] != "Bearer "+secret {
		t.Errorf("the collector got Authorization %q, want the header's decoded value", auth)
	}
	mu.Unlock()
	var warned bool
	for _, l := range jsonLines(t, out.String()) {
		if l["level"] == "WARN" && l["component"] == "otel" && strings.Contains(l["err"].(string), "400") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no WARN line for the refused export in:\n%s", out.String())
	}
	if strings.Contains(out.String(), secret) {
		t.Errorf("the log holds the header value:\n%s", out.String())
	}
}

// TestSDKDiagnosticsKeepOnlyMessageAndError drives the exporter's own
// environment parser, which validateEnv keeps New from reaching with bad
// values, to check the second line: what it logs reaches slog without the
// input it quotes.
func TestSDKDiagnosticsKeepOnlyMessageAndError(t *testing.T) {
	exportOn(t)
	var out testenv.SyncBuffer
	p, err := New(context.Background(), slog.New(slog.NewJSONHandler(&out, nil)), "svc", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()

	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization:Bearer "+secret+",api-key="+secret+"%zz")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", secret)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "::"+secret)
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = exp.Shutdown(context.Background())

	msgs := map[string]bool{}
	for _, l := range jsonLines(t, out.String()) {
		msgs[l["msg"].(string)] = true
	}
	for _, want := range []string{"parse headers", "escape header value", "parse duration", "parse url"} {
		if !msgs[want] {
			t.Errorf("no %q line in:\n%s", want, out.String())
		}
	}
	if s := out.String(); strings.Contains(s, secret) || strings.Contains(s, "zz") {
		t.Errorf("the log quotes the input:\n%s", s)
	}
}

// TestSDKWarningsAreLoggedThroughSlog: the SDK's default logger shows its
// errors only, as plain text.
func TestSDKWarningsAreLoggedThroughSlog(t *testing.T) {
	exportOn(t)
	// The HTTP exporter warns that it ignores the general protocol.
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	var out testenv.SyncBuffer
	p, err := New(context.Background(), slog.New(slog.NewJSONHandler(&out, nil)), "svc", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	for _, l := range jsonLines(t, out.String()) {
		if l["level"] == "WARN" && strings.Contains(l["msg"].(string), "grpc is not a valid protocol") {
			return
		}
	}
	t.Fatalf("no WARN line for the ignored protocol in:\n%s", out.String())
}

// TestDroppedSpansAreLoggedThroughSlog: with a queue of one span and a slow
// collector the batch processor drops spans, which it reports only at debug
// level; a WARN line counts them.
func TestDroppedSpansAreLoggedThroughSlog(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
	}))
	defer collector.Close()
	exportOn(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	var out testenv.SyncBuffer
	p, err := New(context.Background(), slog.New(slog.NewJSONHandler(&out, nil)), "svc", "test")
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		_, span := p.Tracer("t").Start(context.Background(), "s")
		span.End()
	}
	time.Sleep(time.Second) // exports, each logging the count (one 50 ms apart at least)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
	var warnings int
	for _, l := range jsonLines(t, out.String()) {
		if l["level"] == "WARN" && l["component"] == "otel" && strings.Contains(l["msg"].(string), "dropped spans") {
			warnings++
			if n, _ := l["dropped_total"].(float64); n < 1 || n > 199 {
				t.Errorf("dropped_total %v, want 1 to 199", l["dropped_total"])
			}
		}
	}
	if warnings != 1 {
		t.Errorf("%d WARN lines for dropped spans, want 1 (at most one a minute) in:\n%s", warnings, out.String())
	}
}
