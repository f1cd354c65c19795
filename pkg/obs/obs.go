// Package obs holds what operators see of a process: structured logs
// (log/slog, JSON for machines, tint colour for terminals) and the HTTP
// endpoints /healthz, /readyz and /metrics.
package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lmittmann/tint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger returns a JSON logger, or a text logger when format is "text",
// in colour when w is a terminal or forceColor is set. In JSON a duration is
// written as Go's duration string ("1.5s"), as the text handler writes it:
// slog's JSON handler would write nanoseconds as a bare integer, which a
// reader of the log takes for milliseconds or seconds.
func NewLogger(w io.Writer, format string, level slog.Level, forceColor bool) *slog.Logger {
	if format == "text" {
		noColor := !forceColor
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				noColor = false
			}
		}
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: noColor}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}))
}

func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors registered. Each process builds its own: no global registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Readiness aggregates named checks. A component reports its own state with
// Set; /readyz answers 200 only while every component is ready.
type Readiness struct {
	mu     sync.Mutex
	states map[string]string // component → reason it is not ready ("" = ready)
	gauge  *prometheus.GaugeVec
}

// NewReadiness registers a `<namespace>_ready{component}` gauge on reg.
func NewReadiness(reg prometheus.Registerer, namespace string) *Readiness {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: namespace + "_ready",
		Help: "1 while the component is ready, 0 while it is not.",
	}, []string{"component"})
	reg.MustRegister(g)
	return &Readiness{states: map[string]string{}, gauge: g}
}

// Set marks component ready (reason == "") or not ready, reason being what
// /readyz says. Callers that log a change keep their own state: a reason
// may change (a probe's growing wait) while the component stays not ready.
func (r *Readiness) Set(component, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states[component] = reason
	v := 0.0
	if reason == "" {
		v = 1
	}
	r.gauge.WithLabelValues(component).Set(v)
}

// Check returns nil when every component is ready, otherwise an error listing
// the reasons, "; " between components: a reason has spaces of its own.
func (r *Readiness) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var bad []string
	for c, reason := range r.states {
		if reason != "" {
			bad = append(bad, c+": "+reason)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return errors.New("not ready: " + strings.Join(bad, "; "))
}

// Handler serves /healthz (the process answers), /readyz (Readiness) and
// /metrics (reg).
func Handler(reg *prometheus.Registry, ready *Readiness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready.Check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Listen binds addr (HTTP_ADDR). The binaries bind before they create any
// client, so that an address in use or one that does not resolve stops the
// process with its one line, before it has connected anywhere.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on HTTP_ADDR %s: %w", addr, err)
	}
	return ln, nil
}

// Bounds of the HTTP server's connections. A client that opens a connection
// and stops (a probe cut off by a network partition, a scraper gone without
// a FIN) would otherwise hold it, and its goroutine, for as long as the
// process runs: Go's server keeps an idle keep-alive connection forever
// unless told otherwise. idleTimeout is above the usual Prometheus scrape
// intervals (15 s–1 min), so a scraper's connection is still reused;
// writeTimeout bounds a response to a reader that stopped reading, far
// above what serving /metrics takes.
const (
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 2 * time.Minute
	writeTimeout      = 30 * time.Second
)

// Serve serves h on ln until ctx ends, then shuts down gracefully. The
// channel it returns gets the server's error once it stops (nil after a
// clean shutdown).
func Serve(ctx context.Context, logger *slog.Logger, ln net.Listener, h http.Handler) <-chan error {
	return serve(ctx, logger, ln, h, idleTimeout)
}

func serve(ctx context.Context, logger *slog.Logger, ln net.Listener, h http.Handler, idle time.Duration) <-chan error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idle,
		WriteTimeout:      writeTimeout,
	}
	errc := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	go func() {
		<-ctx.Done()
		shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shCtx)
	}()
	logger.Info("http: serving /healthz /readyz /metrics", "addr", ln.Addr().String())
	return errc
}
