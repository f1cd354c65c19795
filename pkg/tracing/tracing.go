// Package tracing turns on OpenTelemetry trace export from the standard
// OTEL_* environment variables and carries W3C trace context across Kafka
// record headers. Export is off unless an OTLP endpoint is configured, so a
// deployment that sets nothing pays for no-op spans only.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Provider is the tracer provider of a process and how to flush it.
type Provider struct {
	trace.TracerProvider
	// Enabled reports whether spans are exported.
	Enabled bool
	// Shutdown flushes pending spans and stops the exporter; a no-op when
	// export is off.
	Shutdown func(context.Context) error
}

// Error names the OTEL_* variable whose value could not be used.
type Error struct {
	Var    string
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("tracing: %s: %s", e.Var, e.Reason) }

// Setting makes an *Error a configuration error to the mains (exit status
// 2: fix the deployment, retrying will not help).
func (e *Error) Setting() string { return e.Var }

// New returns the provider the process environment asks for (the
// exporters and the SDK read it too, so there is no other source to pass).
//
// Export is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, unless OTEL_TRACES_EXPORTER is
// "none" or OTEL_SDK_DISABLED is "true". OTEL_EXPORTER_OTLP_PROTOCOL (or its
// _TRACES_ form) picks "http/protobuf" (the default), "http/json" (the HTTP
// exporter reads it itself) or "grpc". The exporters
// and the SDK read the remaining variables themselves (headers, timeouts,
// OTEL_TRACES_SAMPLER and its argument, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES); service is the name used when
// OTEL_SERVICE_NAME is unset.
//
// With export on, New first rejects, with an *Error, any of those values
// the SDK would drop or replace by a default, and sends the SDK's own
// diagnostics to logger from then on. With export off it reads only
// OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER (a value other than true or
// false, otlp or none, is refused even then), so other stale values do no
// harm.
func New(ctx context.Context, logger *slog.Logger, service, version string) (*Provider, error) {
	getenv := os.Getenv
	off := &Provider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}
	// Only "true" disables the SDK (the specification); a "1" or "yes" of
	// an operator who meant to turn export off would leave it on.
	switch v := strings.ToLower(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); v {
	case "true":
		return off, nil
	case "", "false":
	default:
		return nil, &Error{Var: "OTEL_SDK_DISABLED", Reason: fmt.Sprintf("%q is not true or false", v)}
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "", "otlp":
	case "none":
		return off, nil
	default:
		return nil, &Error{Var: "OTEL_TRACES_EXPORTER", Reason: fmt.Sprintf("%q is not supported (otlp or none)", exp)}
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return off, nil
	}

	protoVar, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		protoVar, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf", "http/json", "grpc":
	default:
		return nil, &Error{Var: protoVar, Reason: fmt.Sprintf("%q is not supported (http/protobuf, http/json or grpc)", proto)}
	}
	grpc := proto == "grpc"
	if err := validateEnv(getenv, grpc); err != nil {
		return nil, err
	}
	routeDiagnostics(logger)

	// WithFromEnv comes after the default name so that OTEL_SERVICE_NAME
	// and OTEL_RESOURCE_ATTRIBUTES win over it. Its only partial result,
	// entries of OTEL_RESOURCE_ATTRIBUTES it drops, validateEnv has
	// rejected, so any error here is one to stop on. Built before the
	// exporter, which would otherwise be left open.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: build resource: %w", err)
	}

	var exporter sdktrace.SpanExporter
	if grpc {
		exporter, err = otlptracegrpc.New(ctx)
	} else {
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: start OTLP exporter: %w", err)
	}

	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, Enabled: true, Shutdown: tp.Shutdown}, nil
}

// BuildVersion is the main module's version as the toolchain recorded it,
// for the traces' service.version ("(devel)" in a source build).
func BuildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}
