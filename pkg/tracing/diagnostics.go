package tracing

import (
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// routeDiagnostics sends OTel's own diagnostics to logger instead of the
// plain stderr lines of the Go log package, which break the JSON stream.
// Both setters are process-wide globals of the OTel API: the last call
// wins, and the binaries call New once.
func routeDiagnostics(logger *slog.Logger) {
	logger = logger.With("component", "otel")
	// Runtime errors (a failed export) carry no header values: net/http
	// and gRPC name a bad header by its key only.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("OpenTelemetry SDK error", "err", err)
	}))
	otel.SetLogger(logr.New(diagnosticSink{logger: logger, dropped: &droppedSpans{}}))
}

// droppedSpans turns the count of spans the batch processor dropped for a
// full queue, which it reports only in a debug line at each export, into a
// warning when it has grown, at most once per dropReportEvery: spans were
// otherwise lost without a word while the collector was slow or down.
type droppedSpans struct {
	mu     sync.Mutex
	warned uint32    // the count of the last warning
	at     time.Time // when it was logged
}

const dropReportEvery = time.Minute

// exportDebug is the batch processor's debug line at each export, and
// droppedKey its running count of dropped spans.
const (
	exportDebug = "exporting spans"
	droppedKey  = "total_dropped"
)

func (d *droppedSpans) note(logger *slog.Logger, kv []any) {
	var total uint32 // the processor's atomic.Uint32
	for i := 0; i+1 < len(kv); i += 2 {
		if n, ok := kv[i+1].(uint32); ok && kv[i] == droppedKey {
			total = n
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if total <= d.warned || (!d.at.IsZero() && time.Since(d.at) < dropReportEvery) {
		return
	}
	logger.Warn("OpenTelemetry dropped spans: its export queue was full (the collector slow or unreachable, or OTEL_BSP_MAX_QUEUE_SIZE too small)",
		"dropped_total", total, "dropped_since_last_warning", total-d.warned)
	d.warned, d.at = total, time.Now()
}

// diagnosticSink is a logr sink that keeps only the message and the error
// of what the SDK logs. logr.FromSlogHandler would pass on the SDK's
// key/values, and they quote the raw input it failed to parse, header
// values included ("input", "value"); it would also map the SDK's warnings,
// V(1), to a slog level below Info.
type diagnosticSink struct {
	logger  *slog.Logger
	dropped *droppedSpans
}

func (diagnosticSink) Init(logr.RuntimeInfo) {}

// Enabled keeps errors and warnings (V(1)), and the SDK's Debug (V(8)) for
// the one line that counts dropped spans; its Info is V(4).
func (diagnosticSink) Enabled(level int) bool { return level <= 1 || level == 8 }

func (s diagnosticSink) Info(level int, msg string, kv ...any) {
	switch {
	case level <= 1:
		s.logger.Warn(msg)
	case msg == exportDebug:
		s.dropped.note(s.logger, kv)
	}
}

func (s diagnosticSink) Error(err error, msg string, _ ...any) {
	s.logger.Error(msg, "err", redactedError(err))
}

func (s diagnosticSink) WithValues(...any) logr.LogSink { return s }
func (s diagnosticSink) WithName(string) logr.LogSink   { return s }

// redactedError is err's text, unless err comes from a parser that quotes
// its input (`invalid URL escape "%zz"` is the tail of a header value;
// strconv and url.Parse quote all of it): then only the parser's verdict.
// validateEnv keeps these from happening; this is the second line.
func redactedError(err error) string {
	var (
		esc  url.EscapeError
		host url.InvalidHostError
		num  *strconv.NumError
		uerr *url.Error
	)
	switch {
	case errors.As(err, &esc):
		return "invalid URL escape (input not shown)"
	case errors.As(err, &host):
		return "invalid character in URL host (input not shown)"
	case errors.As(err, &num):
		return num.Func + ": " + num.Err.Error() + " (input not shown)"
	case errors.As(err, &uerr):
		return "parse URL (input not shown)"
	}
	return err.Error()
}
