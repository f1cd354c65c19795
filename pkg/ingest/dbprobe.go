package ingest

import (
	"context"

	"github.com/pcp/route-processing/pkg/store"
)

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
// The ping gets one statement's bound (DBTimeout, at least
// probeTimeout; a call carrying statements and commit had twice it): it may
// wait for a connection while the other batch in flight and the probe hold
// the pool's, and a database that answers a ping within a statement's
// bound is not down.
func (in *Ingestor) slow(ctx context.Context, err error) bool {
	if !store.TimedOut(err) || ctx.Err() != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, max(probeTimeout, in.cfg.DBTimeout))
	defer cancel()
	return in.store.Ping(pctx) == nil
}
