package tracing

import (
	"errors"
	"log/slog"
	"net/url"
	"strconv"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// routeDiagnostics sends OTel's own diagnostics to logger instead of the
// plain stderr lines of the Go log package, which break the JSON stream.
// Both setters are process-wide globals of the OTel API: the last call
// wins, and the binaries call New once.
func routeDiagnostics(logger *slog.Logger) {
	logger = logger.With("component", "otel")
	// Runtime errors (a failed export, a full queue) carry no header
	// values: net/http and gRPC name a bad header by its key only.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("OpenTelemetry SDK error", "err", err)
	}))
	otel.SetLogger(logr.New(diagnosticSink{logger}))
}

// diagnosticSink is a logr sink that keeps only the message and the error
// of what the SDK logs. logr.FromSlogHandler would pass on the SDK's
// key/values, and they quote the raw input it failed to parse, header
// values included ("input", "value"); it would also map the SDK's warnings,
// V(1), to a slog level below Info.
type diagnosticSink struct{ logger *slog.Logger }

func (diagnosticSink) Init(logr.RuntimeInfo) {}

// Enabled keeps errors and warnings (V(1)); the SDK's Info is V(4) and its
// Debug V(8).
func (diagnosticSink) Enabled(level int) bool { return level <= 1 }

func (s diagnosticSink) Info(_ int, msg string, _ ...any) { s.logger.Warn(msg) }

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
