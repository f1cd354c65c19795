package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/store"
)

// health tracks one dependency: readiness, and one log line per change.
type health struct {
	logger    *slog.Logger
	ready     *obs.Readiness
	component string
	initial   string // the reason it is not ready before it first works
	// symptom names a failure for /readyz in a few words, without what
	// the error may name (a database user and host): the log has the rest.
	symptom func(error) string
	// down: not ready (failing, or not yet seen working); outage: a
	// failure was seen and no success since (consumption pauses); reached:
	// seen working once (no batch starts before, see blocksBatches).
	down    atomic.Bool
	outage  atomic.Bool
	reached atomic.Bool
	// warned: unreached logged since the dependency last worked;
	// schemaWarned: the same for an old schema, which has its own line
	// (a start usually sees "connection refused" first).
	warned       atomic.Bool
	schemaWarned atomic.Bool
	mu           sync.Mutex
	since        time.Time
	// wake: a probe succeeded; calls: the calls outstanding.
	wake  wakeup
	calls callWatch
	// patience bounds each probe: probeTimeout while answers come fast,
	// longer on a slow link (see probeTimeout).
	patience *backoff.Patience
}

func newHealth(logger *slog.Logger, ready *obs.Readiness, component, initial string, symptom func(error) string) *health {
	h := &health{logger: logger.With("dependency", component), ready: ready, component: component, initial: initial,
		symptom: symptom, patience: backoff.NewPatience(probeTimeout, probeWaitMax)}
	if initial != "" {
		h.down.Store(true)
	} else {
		h.reached.Store(true)
	}
	ready.Set(component, initial)
	return h
}

// blocksBatches reports whether no batch may start for the dependency: it failed
// and has not worked since, or it never answered yet (a record consumed then
// could be dead-lettered while the database is unavailable, which contract
// §1.5 forbids).
func (h *health) blocksBatches() bool { return h.outage.Load() || !h.reached.Load() }

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
	h.reached.Store(true)
	h.warned.Store(false)
	h.schemaWarned.Store(false)
	if !h.since.IsZero() {
		h.logger.InfoContext(ctx, h.component+" is back; resuming", "outage", time.Since(h.since).Round(time.Millisecond))
	} else {
		h.logger.InfoContext(ctx, h.component+" is reachable")
	}
	h.since = time.Time{}
	h.ready.Set(h.component, "") // after its line, as in watchBrokers
}

// unreached logs, once until the dependency works, why a probe of a
// dependency not yet seen working failed (wrong password, unknown host):
// nothing is consumed before it answers (blocksBatches), so no call fails and
// nothing else would say why the process is not ready. An outage logs its
// own line.
func (h *health) unreached(ctx context.Context, err error) {
	if h.outage.Load() {
		return
	}
	// Each line goes before the readiness it explains, as in ok and fail.
	var schema *store.SchemaError
	if errors.As(err, &schema) {
		if !h.schemaWarned.Swap(true) {
			h.logger.ErrorContext(ctx, "the database schema is older than this build; nothing is consumed until it is migrated", "err", err)
		}
		h.ready.Set(h.component, fmt.Sprintf("schema at version %d, this build needs %d: run `ingestor migrate`", schema.Have, schema.Want))
		return
	}
	if !h.warned.Swap(true) {
		h.logger.WarnContext(ctx, h.component+" not reachable yet; retrying", "err", err)
	}
	// In the relay's words for the same failure (a refused password is
	// "server error, SQLSTATE 28P01"), replacing an old schema's reason,
	// which no longer holds.
	h.ready.Set(h.component, h.symptom(err))
}

// fail marks the dependency unavailable; /readyz gives h.symptom's words.
func (h *health) fail(ctx context.Context, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outage.Load() {
		return
	}
	h.down.Store(true)
	h.outage.Store(true)
	h.since = time.Now()
	h.logger.ErrorContext(ctx, h.component+" unavailable; pausing consumption and retrying", "err", err)
	h.ready.Set(h.component, h.symptom(err))
}

// The probes of a dependency. While it is down a probe runs every
// probeTick: cheap (a ping, a metadata request), so the retries of the
// expensive work may back off for long while a successful probe cuts their
// wait short and writing resumes within a tick of the dependency's return
// (issue 11 asks for 2 s, of which the tick is the largest part we choose).
// While it is up a tick costs nothing: a call outstanding for stallAfter
// (a database call: for half its bound, if that is shorter) triggers a
// probe, so a hung link (bytes held, no RST) shows in /readyz
// within stallAfter+probeTick+probeTimeout (about 3.3 s; issue 11 asks for
// 5 s), long before the call's own timeout.
//
// probeTimeout is a probe's wait while answers come fast. On a slow link
// the wait grows (backoff.Patience, up to probeWaitMax: four times the
// usual answer, and, while the dependency is down, twice as long after
// each probe without one; see probeUp): a probe that runs out of its wait
// loses its connection (pgx closes a connection whose query it cancels),
// the next one pays for a new connection, and with a fixed 2 s a link
// 700 ms slow per reply failed every probe after the first for good: the
// ingestor stayed paused until the test gave up (pkg/e2e pg-slow-link). A
// hung link on a slow one then shows within
// stallAfter+probeTick+probeWaitMax. The price: after an outage where the
// network dropped the bytes of the probe in flight (not Toxiproxy's, which
// closes its connections when healed), writing resumes up to probeWaitMax
// after the dependency's return instead of probeTimeout.
//
// A dependency that is up and idle (no call outstanding) is probed every
// idleProbeEvery with the cheap probe, if it has one: with no input nothing
// else would notice that it went away, and /readyz would stay 200 through
// a whole outage.
const (
	probeTick      = 250 * time.Millisecond
	stallAfter     = time.Second
	probeTimeout   = 2 * time.Second
	probeWaitMax   = 5 * time.Second
	idleProbeEvery = time.Second
)

// sleep waits d, or less when a probe succeeds meanwhile; false when ctx
// ended.
func (h *health) sleep(ctx context.Context, d time.Duration) bool {
	woken := h.wake.wait()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-woken:
	}
	return true
}

// watch keeps h current with probe until ctx ends: every probeTick while h
// is down, and while up whenever a call has been outstanding for stall, or
// with idleProbe (nil: none) every idleProbeEvery while no call is (two
// failed in a row then mark h down: one slow ping on a loaded machine is no
// outage). A successful probe wakes
// the retries backing off, and ends the outage only when no worker is
// retrying (idle: nothing else would find out). While one is, its success
// ends it: the server may answer and still refuse the work (read-only
// standby, disk full, missing table).
//
// A successful probe also cancels the calls that began before the last
// failed one: they were sent while the server could not be reached, most
// likely on a connection that a blackhole left hanging, and would otherwise
// hold the recovery back until their own timeout. A call begun after the
// last failed probe is never cut short, so a slow write on a database that
// is back is not cancelled over and over.
func (in *Ingestor) watch(ctx context.Context, h *health, probe, idleProbe func(context.Context) error, stall time.Duration, workers *atomic.Int32) {
	noWorker := func() bool { return workers.Load() == 0 }
	var lastFailed, lastIdle time.Time
	idleFailed := 0
	for {
		switch {
		case h.down.Load():
			if err := h.patience.Run(ctx, probe); err != nil {
				lastFailed = time.Now()
				if ctx.Err() == nil {
					h.unreached(ctx, err)
				}
				break
			}
			if n := h.calls.cancelBefore(lastFailed); n > 0 {
				h.logger.WarnContext(ctx, h.component+" answers again; cancelled the calls sent while it did not (they are retried at once)", "calls", n)
			}
			h.wake.broadcast()
			h.okIf(ctx, noWorker)
		case h.calls.oldest() >= stall:
			began := time.Now()
			err := h.probeUp(ctx, probe)
			// The stalled call is still outstanding, or ended in an error
			// (its own bound) while the probe waited: a probe may take as
			// long as the call had left.
			if stalled := h.calls.oldest(); err != nil && ctx.Err() == nil && (stalled >= stall || h.calls.failedSince(began)) {
				lastFailed = time.Now()
				h.fail(ctx, fmt.Errorf("a call was outstanding for %s and a probe failed: %w", stall, err))
			}
		case idleProbe != nil && h.calls.oldest() == 0 && time.Since(lastIdle) >= idleProbeEvery:
			lastIdle = time.Now()
			if err := h.probeUp(ctx, idleProbe); err == nil || ctx.Err() != nil {
				idleFailed = 0
			} else if idleFailed++; idleFailed >= 2 {
				// Two in a row: one slow ping on a loaded machine is not
				// an outage.
				lastFailed = time.Now()
				idleFailed = 0
				h.fail(ctx, fmt.Errorf("idle, and two probes in a row failed: %w", err))
			}
		}
		if !backoff.Sleep(ctx, probeTick) {
			return
		}
	}
}

// probeUp runs a probe of a dependency that is up. Its misses decide
// whether the dependency is down, not how long the next probe waits: they
// are forgiven first, so that an idle ingestor's second probe, or the
// stall after an outage, waits as long as the first (a hung link shows as
// soon as on a link that never failed). Misses lengthen the waits only
// while the dependency is down: that is how its probes learn a slow link.
// So a link that turns slow while the ingestor is idle costs one outage
// (two idle probes miss at the same wait) before the down probes learn it.
func (h *health) probeUp(ctx context.Context, probe func(context.Context) error) error {
	h.patience.Forgive()
	return h.patience.Run(ctx, probe)
}
