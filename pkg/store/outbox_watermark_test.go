package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
)

// TestOutboxClaimFromAndPendingFloor: ClaimFrom leaves out rows below its
// bound; PendingFloor counts leased rows, and never exceeds now() − margin.
func TestOutboxClaimFromAndPendingFloor(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	rows := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() - interval '1 hour' where id = $1`, rows[0].ID)
	require.NoError(t, err)

	var dbNow time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `select now()`).Scan(&dbNow))
	floor, err := b.outbox.PendingFloor(ctx, time.Time{}, 10*time.Second)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow.Add(-time.Hour), floor, 5*time.Second, "the floor is the oldest PENDING row")

	// From 10 minutes ago, the old row is below the bound: only the other.
	from := dbNow.Add(-10 * time.Minute)
	claimed, _, err := b.outbox.ClaimFrom(ctx, from, 10, 0, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, rows[1].ID, claimed[0].ID)

	// The unbounded claim takes the old one; leased, it still holds the floor
	// down (a released or expired lease keeps its next_attempt_at).
	claimed, err = claim(ctx, b, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, rows[0].ID, claimed[0].ID)
	floor, err = b.outbox.PendingFloor(ctx, time.Time{}, 10*time.Second)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow.Add(-time.Hour), floor, 5*time.Second, "leased rows count")

	// Marked, nothing is PENDING: the floor is now() − margin.
	_, err = b.outbox.MarkPublished(ctx, leasesOf(claimed))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() where id = $1`, rows[1].ID)
	require.NoError(t, err)
	floor, err = b.outbox.PendingFloor(ctx, from, 10*time.Second)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow.Add(-10*time.Second), floor, 5*time.Second)
}

// TestOutboxClaimFromUnderHeldSnapshot is the held-xmin case of
// docs/capacity.md: while a REPEATABLE READ snapshot is held in another
// connection, rows inserted and marked leave PENDING index entries that
// vacuum cannot remove. The claim scanning the index from its start reads
// all of them; the claim from the floor reads the live rows only, and finds
// the same rows.
func TestOutboxClaimFromUnderHeldSnapshot(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	hold, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(context.Background()) }()
	var one int
	require.NoError(t, hold.QueryRow(ctx, `select 1`).Scan(&one)) // the snapshot is taken here

	// Churn: 40,000 rows inserted and marked, in rounds, as relays would:
	// each leaves a dead PENDING index entry.
	const rounds, passports = 4, 5_000
	for range rounds {
		relaytest.Seed(t, b.pool, passports, "a", "b")
		_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() where status = 'PENDING'`)
		require.NoError(t, err)
	}
	relaytest.Seed(t, b.pool, 250, "a", "b") // 500 due rows, the live ones
	_, err = b.pool.Exec(ctx, `analyze route_passport_outbox`)
	require.NoError(t, err)

	// A margin of 1 ms isolates the bound: the relay's margin (10 s) adds
	// the entries of the rows marked within it.
	floor, err := b.outbox.PendingFloor(ctx, time.Time{}, time.Millisecond)
	require.NoError(t, err)

	// The claim's index scan, without the locks (as docs/capacity.md
	// measured it): buffers of each.
	scan := func(from any) (buffers int64, ms float64) {
		var plan []byte
		require.NoError(t, b.pool.QueryRow(ctx, `explain (analyze, buffers, format json)
select id from route_passport_outbox
where status = 'PENDING' and next_attempt_at >= $1::timestamptz and next_attempt_at <= now()
  and (locked_until is null or locked_until < now())
order by next_attempt_at, created_at limit 500`, from).Scan(&plan))
		var p []struct {
			Plan struct {
				Hit  int64 `json:"Shared Hit Blocks"`
				Read int64 `json:"Shared Read Blocks"`
			}
			Time float64 `json:"Execution Time"`
		}
		require.NoError(t, json.Unmarshal(plan, &p))
		return p[0].Plan.Hit + p[0].Plan.Read, p[0].Time
	}
	fullBuf, fullMS := scan("-infinity")
	boundBuf, boundMS := scan(floor)

	// The real claims: same rows, timed.
	timed := func(from time.Time) ([]uuid.UUID, time.Duration) {
		start := time.Now()
		rows, _, err := b.outbox.ClaimFrom(ctx, from, 500, 0, time.Minute)
		d := time.Since(start)
		require.NoError(t, err)
		_, err = b.outbox.Release(ctx, leasesOf(rows))
		require.NoError(t, err)
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		return ids, d
	}
	fullIDs, fullClaim := timed(time.Time{})
	boundIDs, boundClaim := timed(floor)
	t.Logf("held snapshot, %d marked rows behind 500 due ones: index scan from the start %d buffers %.1f ms, from the floor %d buffers %.1f ms; claim %s vs %s (shared machine: times are noisy)",
		rounds*passports*2, fullBuf, fullMS, boundBuf, boundMS, fullClaim.Round(time.Microsecond), boundClaim.Round(time.Microsecond))

	require.Len(t, fullIDs, 500)
	require.Equal(t, fullIDs, boundIDs, "the bounded claim finds what the unbounded one does")
	require.Less(t, boundBuf*10, fullBuf, "the bounded scan skips the dead entries")
}
