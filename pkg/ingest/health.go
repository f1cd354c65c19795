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
	"github.com/pcp/route-processing/pkg/record"
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
	h.ready.Set(h.component, h.initial) // an old schema's reason no longer holds
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

// wakeup lets a successful probe end the backoff sleeps of the retries
// waiting for a dependency.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next broadcast.
func (w *wakeup) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *wakeup) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

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

// callWatch knows the outstanding calls to a dependency: since when the
// oldest runs, and how to cancel those that began before a point in time.
type callWatch struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]call
	// failedAt is when a call last ended with an error (unix nanos).
	failedAt atomic.Int64
}

// failed records that a call ended with an error.
func (w *callWatch) failed() { w.failedAt.Store(time.Now().UnixNano()) }

// failedSince reports whether a call ended with an error after t.
func (w *callWatch) failedSince(t time.Time) bool { return w.failedAt.Load() > t.UnixNano() }

type call struct {
	start  time.Time
	cancel context.CancelFunc // nil: not to be cut short
	cut    bool               // cancelBefore cancelled it
}

// start registers a call and the function that cancels it (nil: never
// cancelled); the caller passes the id to end.
func (w *callWatch) start(cancel context.CancelFunc) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == nil {
		w.open = map[uint64]call{}
	}
	w.next++
	w.open[w.next] = call{start: time.Now(), cancel: cancel}
	return w.next
}

// end unregisters a call and reports whether cancelBefore cut it short.
func (w *callWatch) end(id uint64) (cut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut = w.open[id].cut
	delete(w.open, id)
	return cut
}

// oldest is the age of the oldest outstanding call (0: none).
func (w *callWatch) oldest() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, c := range w.open {
		if first.IsZero() || c.start.Before(first) {
			first = c.start
		}
	}
	if first.IsZero() {
		return 0
	}
	return time.Since(first)
}

// cancelBefore cancels the cancellable calls that began before t and
// reports how many.
func (w *callWatch) cancelBefore(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id, c := range w.open {
		if c.cancel != nil && !c.cut && c.start.Before(t) {
			c.cancel()
			c.cut = true
			w.open[id] = c
			n++
		}
	}
	return n
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

// pings reports whether the database answers a ping within the wait of
// its probes.
func (in *Ingestor) pings(ctx context.Context) bool {
	return in.dbHealth.patience.Run(ctx, in.store.Ping) == nil
}

// probeDB is the database's probe: it answers, and no write of ours is
// stuck behind a lock nobody is working to release, in one round trip
// (store's Stuck: its answer is the proof that the database answers), so
// that a slow link is not taken for a hung one sooner than it must. The
// lock half is what makes a blocked write an outage (see slow): it runs
// only while a call is stalled or the database is down, so it costs
// nothing in the steady state. Until the database first answers it checks
// the schema instead: on a database never migrated every write failed with
// "relation does not exist", retried as an outage forever, with nothing
// saying to run `ingestor migrate`.
func (in *Ingestor) probeDB(ctx context.Context) error {
	if !in.dbHealth.reached.Load() {
		// Nothing of ours runs yet that could be stuck: one round trip,
		// as after the first answer.
		return in.store.CheckSchema(ctx)
	}
	return in.store.Stuck(ctx)
}

// slow reports whether err is a call that ran out of its bound
// (INGEST_DB_TIMEOUT, or a statement_timeout the operator set for the
// role or the server) while the database still answers: it is slow (a
// loaded machine, a large batch), not down, so the write is retried (in
// halves if it keeps failing) without pausing consumption or turning
// /readyz red. A write that is stuck rather than slow is reported by the
// watch's probe (probeDB) within a second or so, before its own bound runs
// out; one that a shorter statement_timeout cuts first, by writeSlow, as a
// lone record that keeps timing out.
//
// The ping gets one statement's bound (WriteTimeout, at least
// probeTimeout; a call carrying statements and commit had twice it): it may
// wait for a connection while the other batch in flight and the probe hold
// the pool's, and a database that answers a ping within a statement's
// bound is not down.
func (in *Ingestor) slow(ctx context.Context, err error) bool {
	if !store.TimedOut(err) || ctx.Err() != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, max(probeTimeout, in.cfg.WriteTimeout))
	defer cancel()
	return in.store.Ping(pctx) == nil
}

// dlqSymptom is the DLQ's /readyz reason: the topic, named, when the
// brokers answer without it (a *record.TopicError), else "unavailable".
func dlqSymptom(err error) string {
	var topicErr *record.TopicError
	if errors.As(err, &topicErr) {
		return topicErr.Error()
	}
	return "unavailable"
}

// probeDLQ asks the DLQ's brokers for the topic's metadata, within ctx's
// deadline (the health's patience).
func (in *Ingestor) probeDLQ(ctx context.Context) error {
	return in.deadLetters.Probe(ctx, in.cfg.DLQTopic, probeWaitMax)
}
