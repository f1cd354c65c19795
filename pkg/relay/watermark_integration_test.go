package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestRelayClaimsRowsBelowTheWatermark: a row that becomes PENDING with a
// next_attempt_at an hour below the watermark (as a transaction open for
// longer than the margin, or a hand edit, would write it) is not seen by the
// bounded claims, and is published after the next full rescan, within
// ClaimFullScanInterval.
func TestRelayClaimsRowsBelowTheWatermark(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	b := setup(t, bootstrap)
	topic := testenv.Topic(t, "watermark", 1)
	ctx := context.Background()
	const every = 2 * time.Second
	b.start(t, relay.Config{PollInterval: 100 * time.Millisecond, ClaimFullScanInterval: every, ClaimWatermarkMargin: 500 * time.Millisecond})
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})
	eventually(t, 10*time.Second, "first row published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 1 })

	// Paused, the workers still claim (nothing) every poll, and the
	// watermark advances to now − margin.
	require.NoError(t, b.outbox.SetPaused(ctx, true, "", "test"))
	time.Sleep(1500 * time.Millisecond)
	late := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: topic})[0]
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() - interval '1 hour', created_at = now() - interval '1 hour' where id = $1`, late.ID)
	require.NoError(t, err)
	require.NoError(t, b.outbox.SetPaused(ctx, false, "", "test"))
	start := time.Now()
	// The next full rescan is due `every` after the last one, or 9× that
	// one's duration when longer (watermarked.recompute): on a loaded
	// machine (make test, 2 cores) a floor query of 0.8 s puts it 7 s away.
	eventually(t, every+15*time.Second, "the row below the watermark published", func() bool {
		return relaytest.Get(t, b.pool, late.ID).Status == outbox.StatusPublished
	})
	t.Logf("row an hour below the watermark published %s after the resume (full rescan every %s)", time.Since(start).Round(time.Millisecond), every)
}

// TestRelayClaimsDuringALongHold: with a snapshot held open while 300,000
// outbox rows were published, the watermark's first full rescan reads every
// PENDING index entry vacuum could not prune, longer than a claim's bound
// (DBTimeout while no claim has succeeded yet: here a third of the rescan
// as measured just before, so that the claims fit in it on a loaded
// machine too). The rescan runs under a bound of its own, so the relay
// starts claiming from the watermark and publishes. While it ran inside
// the claim's bound, every claim failed, and a relay started during such a
// hold published nothing until it ended.
func TestRelayClaimsDuringALongHold(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	b := setup(t, bootstrap)
	topic := testenv.Topic(t, "long-hold", 1)
	ctx := context.Background()

	hold := operatorConn(t, b.url)
	tx, err := hold.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "select 1") // takes the snapshot
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	// Held index entries until a full rescan outlasts twice the shortest
	// claim bound (100 ms), and so the bound below (a third of it, at
	// least 100 ms): 300,000 took 0.2–0.3 s on the 2-core VMs.
	var rescan time.Duration
	seeded := 0
	for round := 1; rescan <= 250*time.Millisecond; round++ {
		require.LessOrEqual(t, round, 4, "a full rescan over %d held index entries took only %s: this test needs it to outlast a claim's bound", 2*seeded, rescan)
		relaytest.Seed(t, b.pool, 150_000, topic, topic)
		seeded += 150_000
		_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() where status = 'PENDING'`)
		require.NoError(t, err)
		start := time.Now()
		_, err = b.outbox.PendingFloor(ctx, time.Time{}, 0)
		require.NoError(t, err)
		rescan = time.Since(start)
	}
	// The claim's bound: LockTimeout − PublishTimeout is not above
	// LeaseMargin, so DBTimeout is all a claim ever gets, while the
	// refresh may take the whole lease (20 s: under CI's load a rescan of
	// 0.3 s alone took over 3 s).
	dbTimeout := max(rescan/3, 100*time.Millisecond).Round(10 * time.Millisecond)
	t.Logf("figures: full rescan over %d held index entries: %s; claims bounded at %s", 2*seeded, rescan.Round(time.Millisecond), dbTimeout)

	rows := make([]outbox.Event, 20)
	for i := range rows {
		rows[i] = outbox.Event{Topic: topic}
	}
	relaytest.MustInsert(t, b.pool, rows...)
	b.start(t, relay.Config{PollInterval: 100 * time.Millisecond, DBTimeout: dbTimeout,
		LockTimeout: 10*time.Second + relay.LeaseMargin, PublishTimeout: 10 * time.Second, ClaimWatermarkMargin: 100 * time.Millisecond})
	// Without the watermark nothing is published until the hold ends (the
	// test's end). The bound is generous: beside two other packages' tests
	// this took 42–49 s, and it failed at 40 s in two runs of `make test`
	// on the 2-core VM (07:14 and 12:02 UTC, 2026-12-07).
	eventually(t, 90*time.Second, "the rows written during the hold published", func() bool {
		return relaytest.Count(t, b.pool, outbox.StatusPublished) == 2*seeded+len(rows)
	})
}
