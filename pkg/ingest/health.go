package ingest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/obs"
)

// health tracks one dependency: readiness, and one log line per change.
type health struct {
	logger    *slog.Logger
	ready     *obs.Readiness
	component string
	// down: not ready (failing, or not yet seen working); outage: a
	// failure was seen and no success since (consumption pauses).
	down   atomic.Bool
	outage atomic.Bool
	mu     sync.Mutex
	since  time.Time
}

func newHealth(logger *slog.Logger, ready *obs.Readiness, component, initial string) *health {
	h := &health{logger: logger.With("dependency", component), ready: ready, component: component}
	if initial != "" {
		h.down.Store(true)
	}
	ready.Set(component, initial)
	return h
}

// ok marks the dependency working.
func (h *health) ok(ctx context.Context) { h.okIf(ctx, nil) }

// okIf marks the dependency working, but ends an outage only when mayEnd
// (nil: always) says so. A probe proves that the server answers, not that
// writes succeed: it may clear the initial "not reached yet" state, while
// an outage a write reported ends with a successful write.
func (h *health) okIf(ctx context.Context, mayEnd func() bool) {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return
	}
	if mayEnd != nil && h.outage.Load() && !mayEnd() {
		return
	}
	h.down.Store(false)
	h.outage.Store(false)
	h.ready.Set(h.component, "")
	if !h.since.IsZero() {
		h.logger.InfoContext(ctx, h.component+" is back; resuming", "outage", time.Since(h.since).Round(time.Millisecond))
	} else {
		h.logger.InfoContext(ctx, h.component+" is reachable")
	}
	h.since = time.Time{}
}

// fail marks the dependency unavailable.
func (h *health) fail(ctx context.Context, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outage.Load() {
		return
	}
	h.down.Store(true)
	h.outage.Store(true)
	h.since = time.Now()
	h.ready.Set(h.component, "unavailable")
	h.logger.ErrorContext(ctx, h.component+" unavailable; pausing consumption and retrying", "err", err)
}

// probeEvery is the database probe's period while it is up, and the cap of
// its backoff while it is down.
const probeEvery = 5 * time.Second

// probeDatabase pings until the first success, so /readyz turns ready
// without traffic, and then whenever the database is marked down and no
// batch is there to find out it is back. A ping does not end an outage
// that a batch still retrying reported: the server may answer and still
// refuse writes (read-only standby, disk full, missing table); that batch
// ends the outage when its write succeeds.
func (in *Ingestor) probeDatabase(ctx context.Context) {
	bo := backoff.New(in.cfg.MinBackoff, min(in.cfg.MaxBackoff, probeEvery))
	noWriter := func() bool { return in.dbWriters.Load() == 0 }
	for {
		wait := probeEvery
		if in.dbHealth.down.Load() {
			wait = bo.Next()
			if !in.dbHealth.outage.Load() || noWriter() {
				if in.pings(ctx) {
					in.dbHealth.okIf(ctx, noWriter)
					if !in.dbHealth.down.Load() {
						bo.Reset()
						wait = probeEvery
					}
				}
			}
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// pings reports whether the database answers a ping within probeEvery.
func (in *Ingestor) pings(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, probeEvery)
	defer cancel()
	return in.store.Ping(pctx) == nil
}
