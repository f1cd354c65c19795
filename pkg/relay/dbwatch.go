package relay

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// watchWrite probes the database every half of DBTimeout, but at least once a
// second, while a call is running: a claim or a write may legitimately run
// long behind a backlog or a held snapshot (claimCall, writeCall), but a hung
// link or a call stuck behind someone's lock must show in /readyz within
// seconds (issue 11), so a cheap read and a look at the relay's lock waits,
// with a short timeout, tell the two apart. The probe repeats because a link
// can fail after the first probe passed, and a claim may run for 20 s. A
// failed probe also calls cut (if not nil): a claim is cut and claimed again,
// on a connection that works, while a write runs on, since its rows stay
// leased to it. It returns the function that ends the watch and reports
// whether a probe got an answer meanwhile (the database answered while the
// call ran: a call that ran out of its bound was slow, not lost).
func (r *Relay) watchWrite(ctx context.Context, op string, cut context.CancelFunc) (stop func() (answered bool)) {
	every := min(r.cfg.DBTimeout/2, time.Second)
	start := time.Now()
	var mu sync.Mutex
	stopped, answered := false, false
	var t *time.Timer
	probe := func() {
		err := r.dbPatience.Run(ctx, r.probeDB)
		mu.Lock()
		defer mu.Unlock()
		if stopped || ctx.Err() != nil {
			return
		}
		if err == nil {
			answered = true
			t.Reset(every)
			return
		}
		r.dbFailed(fmt.Sprintf("%s outstanding for %s", op, time.Since(start).Round(time.Millisecond)), err)
		if cut != nil {
			cut()
		}
	}
	mu.Lock()
	t = time.AfterFunc(every, probe)
	mu.Unlock()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
		return answered
	}
}

// A database probe of a running call (watchWrite, r.dbPatience) waits
// DBTimeout, at most dbProbeWait, while answers come fast: a hung link
// shows within 3 s of the call's start with the defaults (1 s before the
// probe, 2 s for it). It is one query and the pool's ping of a connection
// idle for a second, two round trips; at 1.5 s a link 700 ms slow per
// reply kept the relay not ready in three polls of four (pkg/e2e
// pg-slow-link). On a slower link the wait grows up to dbProbeWaitMax
// (four times the usual answer, twice as long after each probe in a row
// without one, until a claim succeeds): a probe that runs out of its wait
// loses its connection (pgx closes a connection whose query it cancels),
// and the next one pays for a new connection, so a fixed wait below the
// link's round trips failed every probe after the first.
const (
	dbProbeWait    = 2 * time.Second
	dbProbeWaitMax = 5 * time.Second
)

// probeDB is watchWrite's probe: the database answers, and no call of the
// relay is stuck behind a lock, in one round trip (store's Stuck: its
// answer is the proof that the database answers), so that a link slow by
// a second is not taken for a hung one.
func (r *Relay) probeDB(ctx context.Context) error {
	return r.outbox.Stuck(ctx)
}
