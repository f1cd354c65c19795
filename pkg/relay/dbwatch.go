package relay

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// dbCall returns ctx bounded by Config.DBTimeout, for one database call.
func (r *Relay) dbCall(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.DBTimeout)
}

// claimCall returns ctx bounded for one claim: as long as the lease leaves
// room for (LockTimeout − PublishTimeout − LeaseMargin: the rows' lease
// starts with the claim's transaction, and the publish and marks still need
// theirs), and at least DBTimeout. A claim that walks the dead index
// entries of a held snapshot can take seconds (the soak at 500 passports/s:
// claims past 3 s at the end of a 5-minute hold); cutting it at DBTimeout
// threw its work away, turned /readyz red and backed off, so the relay
// published nothing until the hold ended. A hung link or a claim stuck
// behind a lock still shows in /readyz within seconds (watchCall).
//
// While "postgres" is not ready the claim is the relay's probe, bounded by
// DBTimeout: one sent into a blackhole may sit on a connection that never
// answers again, while watchCall's probe, on a new connection after the
// heal, succeeds and would not cut it (TestRelayPostgresBlackhole under
// CI's load: nothing published for 20 s after the heal). Each claim in a
// row that runs out that bound while a probe got an answer (a slow
// database, not a lost call, which is not counted: its probe's verdict and
// its bound both come DBTimeout in) doubles it, up to the full bound, so that an outage during a held snapshot does not leave the relay
// cutting every claim until the snapshot ends.
func (r *Relay) claimCall(ctx context.Context) (context.Context, context.CancelFunc) {
	full := max(r.cfg.DBTimeout, r.cfg.LockTimeout-r.cfg.PublishTimeout-LeaseMargin)
	if !r.claimsHealthy.Load() {
		return context.WithTimeout(ctx, min(full, r.cfg.DBTimeout<<min(r.claimsTimedOut.Load(), 8)))
	}
	return context.WithTimeout(ctx, full)
}

// writeCall returns ctx bounded by the lease's end (and at least
// Config.DBTimeout), for one mark, retry, postpone or release. Those write
// hundreds of rows and wait for their commit, which under load queues
// behind other writers: in the soak at 1,500 passports/s 500-row marks
// passed 9 s, and cancelling one throws its work away only to redo it on a
// database that was merely busy. Past the lease the rows are the next
// claimer's anyway. A hung link still shows in /readyz within seconds:
// watchCall probes while a write is outstanding.
func (r *Relay) writeCall(ctx context.Context, leaseEnd time.Time) (context.Context, context.CancelFunc) {
	end := time.Now().Add(r.cfg.DBTimeout)
	if leaseEnd.After(end) {
		end = leaseEnd
	}
	return context.WithDeadline(ctx, end)
}

// watchCall probes the database every half of DBTimeout, but at least once a
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
func (r *Relay) watchCall(ctx context.Context, op string, cut context.CancelFunc) (stop func() (answered bool)) {
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

// A database probe of a running call (watchCall, r.dbPatience) waits
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

// probeDB is watchCall's probe: the database answers, and no call of the
// relay is stuck behind a lock, in one round trip (store's Stuck: its
// answer is the proof that the database answers), so that a link slow by
// a second is not taken for a hung one.
func (r *Relay) probeDB(ctx context.Context) error {
	return r.outbox.Stuck(ctx)
}
