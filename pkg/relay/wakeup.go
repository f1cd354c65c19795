package relay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pcp/route-processing/pkg/outbox"
)

// Wake-up modes: how the relay learns of new rows.
const (
	modeNotify = "notify"
	modePoll   = "poll"
)

// probeWait is how long the relay waits for its own probe notification
// after the listener (re)connected. A working LISTEN hears it within
// milliseconds; a late one is corrected by the next notification.
const probeWait = 3 * time.Second

// relistenEvery is how often the relay asks for a new LISTEN connection
// while notifications do not arrive (Relisten).
const relistenEvery = 30 * time.Second

// Relisten receives a value whenever the listener should connect anew
// (store.Listen takes it): every Config.RelistenInterval (relistenEvery by
// default) while the relay polls because notifications do not arrive. The
// connection may hang without an error: a frozen server, or a failover while
// the old primary's link holds every byte, where the listener stayed on the
// old primary for good. Behind a transaction pooler without
// DATABASE_LISTEN_URL it reconnects at that interval, which costs one
// connection and the probe.
func (r *Relay) Relisten() <-chan struct{} { return r.relisten }

// watchListener asks for a new listener connection every relistenEvery
// (Config.RelistenInterval) while the relay polls.
func (r *Relay) watchListener(ctx context.Context) {
	if r.notifier == nil {
		return // no probe, no way to tell a listener that hears from one that does not
	}
	t := time.NewTicker(r.cfg.RelistenInterval)
	defer t.Stop()
	var asked time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		polling := r.wakeMode() == modePoll
		// Not again before the last new connection was made: asked again
		// while it connects (a first host that hangs takes its
		// connect_timeout), it would never reach the next host.
		if polling && (asked.IsZero() || time.Unix(0, r.connected.Load()).After(asked)) {
			select {
			case r.relisten <- struct{}{}:
				asked = time.Now()
			default: // one is waiting already
			}
		}
	}
}

// Notifier sends one notification on the outbox channel through the
// relay's pool, as the ingestor's commits do; *store.Outbox implements it.
// The relay probes its listener when the Outbox given to New is also a
// Notifier.
type Notifier interface {
	Notify(ctx context.Context) error
}

// Connected is called after each (re)connect of the listener.
// Notifications sent while it was disconnected are lost, so it wakes the
// workers. It also checks that the new LISTEN hears: it sends a
// notification through the pool and, if none arrives within probeWait,
// the relay says it polls. Behind PgBouncer in transaction mode LISTEN
// succeeds and hears nothing; without the probe the relay would learn that
// only when a poll happens to find rows nobody announced (notePoll), which
// a busy relay may never do.
func (r *Relay) Connected(ctx context.Context) {
	r.connected.Store(time.Now().UnixNano())
	r.Wake()
	if r.notifier != nil {
		go r.probeListener(ctx)
	}
}

func (r *Relay) probeListener(ctx context.Context) {
	sent := time.Now()
	c, cancel := r.dbCall(ctx)
	err := r.notifier.Notify(c)
	cancel()
	if err != nil {
		// The database is unreachable; the listener will reconnect and
		// probe again.
		r.logger.DebugContext(ctx, "cannot send the listener probe", "err", err)
		return
	}
	t := time.NewTimer(probeWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	if r.lastNotify.Load() < sent.UnixNano() {
		r.setMode(ctx, modePoll)
	}
}

// Notified is called for every NOTIFY on the outbox channel: it wakes one
// worker (wakeOne) and, if the relay had concluded that notifications do
// not arrive, says they do again.
func (r *Relay) Notified() {
	r.lastNotify.Store(time.Now().UnixNano())
	r.setMode(context.Background(), modeNotify)
	r.wakeOne()
}

// notePoll is told of each claim that a worker made after its poll timer
// (not a wake) ended its sleep; prevClaim is when that worker's previous
// claim returned, claimed when this one did. Rows created after prevClaim
// (by the relay's clock: the claim's time less the row's age by the
// database's), with no notification since,
// were never announced, unless a notification comes within probeWait of
// the claim: behind PgBouncer in transaction mode LISTEN succeeds and hears
// nothing. Rows due again after a retry are old and do
// not count, nor do rows created before the listener's last (re)connect:
// their notifications went while nobody listened (PostgreSQL restarted),
// and counting them made every restart log that notifications do not
// arrive.
func (r *Relay) notePoll(ctx context.Context, prevClaim, claimed time.Time, rows []outbox.Row) {
	if len(rows) == 0 || r.lastNotify.Load() > prevClaim.UnixNano() {
		return
	}
	since := prevClaim
	if c := time.Unix(0, r.connected.Load()); c.After(since) {
		since = c
	}
	fresh := false
	for i := range rows {
		if claimed.Add(-rows[i].AgeAtClaim).After(since) {
			fresh = true
			break
		}
	}
	// One such poll is enough, once no notification followed it within
	// probeWait. Not at once: the claim may see the rows before their
	// notification arrives. The ingestor notifies just after its commit,
	// in a transaction of its own (store.Passports.Write), which may wait
	// for another notifying transaction's flush; a working LISTEN hears it
	// within milliseconds, as it hears the probe. (A false alarm is
	// corrected by the next notification.)
	if fresh {
		time.AfterFunc(probeWait, func() {
			if ctx.Err() == nil && r.lastNotify.Load() < claimed.UnixNano() {
				r.setMode(ctx, modePoll)
			}
		})
	}
}

// wakeMode is the wake-up mode: modeNotify or modePoll.
func (r *Relay) wakeMode() string {
	r.modeMu.Lock()
	defer r.modeMu.Unlock()
	return r.mode
}

// setMode records the wake-up mode in the gauge, and logs each change.
func (r *Relay) setMode(ctx context.Context, mode string) {
	r.modeMu.Lock()
	defer r.modeMu.Unlock()
	if r.mode == mode {
		return
	}
	first := r.mode == ""
	r.mode = mode
	for _, m := range []string{modeNotify, modePoll} {
		v := 0.0
		if m == mode {
			v = 1
		}
		r.m.wakeupMode.WithLabelValues(m).Set(v)
	}
	switch {
	case first:
	case mode == modePoll:
		r.logger.WarnContext(ctx, "outbox notifications do not arrive (LISTEN through a transaction pooler, or DATABASE_LISTEN_URL at a server that is gone or is not the primary? point it at the primary directly); polling every poll interval",
			"wakeup_mode", mode, "poll_interval", r.cfg.PollInterval)
	default:
		r.logger.InfoContext(ctx, "outbox notifications arrive again", "wakeup_mode", mode)
	}
}

// wakeSlot is one worker's wake-up: a buffered channel, so that wakes
// arriving while the worker is busy collapse into one pending wake, and
// whether the worker sleeps.
type wakeSlot struct {
	ch       chan struct{}
	sleeping atomic.Bool
}

// wake leaves a wake for the worker unless one is pending already.
func (s *wakeSlot) wake() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// Wake tells every worker that rows may be due (the listener reconnected,
// the relay resumed; a NOTIFY goes through [Relay.Notified]). It never
// blocks.
func (r *Relay) Wake() {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	for _, s := range r.wakes {
		s.wake()
	}
}

// wakeOne wakes one worker: a sleeping one if there is one, else it leaves
// a pending wake with a busy one, which claims again once its batch is
// done, so no announced row waits for the poll timer.
//
// A NOTIFY announces one ingest transaction's rows, which one claim takes.
// Waking every worker for it had the others claim nothing, a round trip and
// a statement each: at a low rate half of all claims. A worker whose claim
// suggests more rows wakes the next one itself (worker), so a backlog
// still gets every worker.
func (r *Relay) wakeOne() {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	n := len(r.wakes)
	if n == 0 {
		return
	}
	start := r.nextWake
	r.nextWake = (start + 1) % n
	for i := range n {
		if s := r.wakes[(start+i)%n]; s.sleeping.Load() {
			s.wake()
			return
		}
	}
	r.wakes[start].wake()
}

// sleep waits for a wake, d, or the end of ctx; it reports whether a wake
// ended it. While it waits the slot counts as sleeping for wakeOne.
func (s *wakeSlot) sleep(ctx context.Context, d time.Duration) bool {
	s.sleeping.Store(true)
	defer s.sleeping.Store(false)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.ch:
		return true
	case <-t.C:
	}
	return false
}
