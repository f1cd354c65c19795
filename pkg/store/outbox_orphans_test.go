package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestOutboxClaimAnsweredTooLate: the link delays every answer beyond the
// claim's timeout, so a claim runs on the server, leases its rows, and fails
// on the client; the give-back sent at once fails the same way. The rows
// then hold a lease nobody has. Once the link is fast again the next claim
// gives that lease back and gets the rows, instead of every relay waiting a
// whole lease (here 1 min) for them.
func TestOutboxClaimAnsweredTooLate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	cluster.CreateDatabase(t, "late_claim", true)
	proxy := testenv.NewFaultProxy(t, "pg", cluster.Addr())
	direct, err := store.Open(ctx, cluster.URLAt(cluster.Addr(), "late_claim"), "test")
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	pool, err := store.Open(ctx, cluster.URLAt(proxy.Addr(), "late_claim"), "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ob := store.NewOutbox(pool)

	// One open connection through the proxy, so that the claim below is
	// sent at once rather than stuck in a connection attempt.
	rows, _, err := ob.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	require.Empty(t, rows)
	relaytest.MustInsert(t, direct, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	proxy.Latency(t, 2*time.Second, 0)
	failing, stop := context.WithTimeout(ctx, time.Second)
	_, _, err = ob.Claim(failing, 10, 0, time.Minute)
	stop()
	require.Error(t, err, "a claim whose answer takes 2 s, with a 1 s timeout")
	deadline := time.Now().Add(10 * time.Second)
	for leased(ctx, t, direct) < 3 {
		require.True(t, time.Now().Before(deadline), "the late claim did not lease the rows on the server within 10 s")
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Heal(t, "latency")

	start := time.Now()
	var got []outbox.Row
	for len(got) < 3 && time.Since(start) < 5*time.Second {
		more, _, err := ob.Claim(ctx, 10, 0, time.Minute)
		if err == nil {
			got = append(got, more...)
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, got, 3, "the rows of the claim that failed are claimed again within 5 s of the heal, not after their 1 min lease")
	t.Logf("figures: rows of the claim answered too late claimed again %.2fs after the heal", time.Since(start).Seconds())
}

// leased counts the outbox rows that hold a lease.
func leased(ctx context.Context, t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `select count(*) from route_passport_outbox where lock_token is not null`).Scan(&n))
	return n
}

// TestOutboxClaimRunsAfterItsGiveBack: a claim cut while it waits for a
// lock (here an operator's lock on the pause flag, which the give-back does
// not read) is given back at once, and that give-back works, yet the claim
// may still run: the moment the lock goes, if pgx's cancel request reaches
// the server after that. Its rows would then wait a whole lease. The claim
// is remembered and given back again by later claims, so its rows are
// claimed again within a second. The cancel request usually wins the race,
// so the test writes what the late statement would have: a lease under the
// claim's token.
func TestOutboxClaimRunsAfterItsGiveBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, ob, token, unlock := cutClaim(ctx, t)
	require.Zero(t, leased(ctx, t, pool), "nothing leased: the claim was cancelled on the server and the give-back found nothing")

	lateLease(ctx, t, pool, token)
	unlock()
	start := time.Now()
	var got []outbox.Row
	for len(got) == 0 && time.Since(start) < 3*time.Second {
		var err error
		got, _, err = ob.Claim(ctx, 10, 0, time.Minute)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, got, 1, "the row the late claim leased is claimed again within 3 s, not after its 1 min lease")
	t.Logf("figures: the row of a claim that ran after its give-back claimed again %.2fs later", time.Since(start).Seconds())
}

// TestOutboxStopGivesBackACutClaim: a stop cuts the claim in flight, and
// the server may finish it after its give-back; no later claim of this
// relay will give it back again. ReleaseOrphans, run once the claims have
// stopped, does: the lease the late statement took (written by the test,
// as above) is gone within about a second, not after its minute.
func TestOutboxStopGivesBackACutClaim(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, ob, token, unlock := cutClaim(ctx, t)
	unlock()

	// The late statement's lease lands while ReleaseOrphans waits between
	// its give-backs.
	done := make(chan struct{})
	go func() {
		defer close(done)
		ob.ReleaseOrphans(ctx)
	}()
	time.Sleep(100 * time.Millisecond)
	lateLease(ctx, t, pool, token)
	<-done
	require.Zero(t, leased(ctx, t, pool), "the late lease given back at the stop")
}

// cutClaim inserts one row and cuts a claim after 300 ms while an
// operator's lock on the pause flag holds it; unlock ends the lock. The
// claim is remembered for giving back (its token).
func cutClaim(ctx context.Context, t *testing.T) (pool *pgxpool.Pool, ob *store.Outbox, token uuid.UUID, unlock func()) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ob = store.NewOutbox(pool)
	relaytest.MustInsert(t, pool, outbox.Event{Topic: "t"})

	op, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = op.Close(context.Background()) })
	tx, err := op.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `lock table outbox_relay_control in access exclusive mode`)
	require.NoError(t, err)
	cut, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = ob.Claim(cut, 10, 0, time.Minute)
	stop()
	require.Error(t, err, "a claim waiting for the lock, cut after 300 ms")
	tokens := store.RememberedClaims(ob)
	require.Len(t, tokens, 1, "the cut claim is remembered, whether or not its give-back worked")
	return pool, ob, tokens[0], func() { require.NoError(t, tx.Rollback(ctx)) }
}

// lateLease writes what a cut claim that ran late on the server would
// have: a lease of a minute under its token (the test cannot stage the
// race reliably).
func lateLease(ctx context.Context, t *testing.T, pool *pgxpool.Pool, token uuid.UUID) {
	t.Helper()
	_, err := pool.Exec(ctx, `update route_passport_outbox set lock_token = $1::uuid, locked_until = now() + interval '1 minute'`, token.String())
	require.NoError(t, err)
}
