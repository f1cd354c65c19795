package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
)

// TestOutboxSweepFromUnderHeldSnapshot: while a snapshot is held, the rows
// a sweep deleted keep their PUBLISHED index entries, and a statement that
// starts at the oldest entry visits them all again; one that starts where
// the last ended (less the relay's margin) does not, and deletes the rows
// past retention.
func TestOutboxSweepFromUnderHeldSnapshot(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	hold, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(context.Background()) }()
	var one int
	require.NoError(t, hold.QueryRow(ctx, `select 1`).Scan(&one)) // the snapshot is taken here

	// 40,000 rows published over ten minutes two hours ago, swept.
	const passports, limit = 20_000, 5_000
	relaytest.Seed(t, b.pool, passports, "a", "b")
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED',
    published_at = now() - interval '2 hours' + random() * interval '10 minutes'`)
	require.NoError(t, err)
	var from time.Time
	deleted := int64(0)
	for {
		n, last, err := b.outbox.DeletePublished(ctx, time.Hour, limit, from)
		require.NoError(t, err)
		deleted += n
		if n > 0 {
			from = last.Add(-10 * time.Second)
		}
		if n < limit {
			break
		}
	}
	require.EqualValues(t, 2*passports, deleted)

	// 500 rows published after them, also past retention, and 20,000
	// within it (the steady state: most PUBLISHED rows are retained).
	relaytest.Seed(t, b.pool, 250, "c", "d")
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED',
    published_at = now() - interval '1 hour 30 minutes' where status = 'PENDING'`)
	require.NoError(t, err)
	relaytest.Seed(t, b.pool, 10_000, "e", "f")
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED',
    published_at = now() - random() * interval '30 minutes' where status = 'PENDING'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `analyze route_passport_outbox`)
	require.NoError(t, err)

	fullBuf := sweepBuffers(ctx, t, b, limit, time.Time{})
	boundBuf := sweepBuffers(ctx, t, b, limit, from)
	n, _, err := b.outbox.DeletePublished(ctx, time.Hour, limit, from)
	require.NoError(t, err)
	t.Logf("held snapshot, %d swept rows behind 500 due ones (and 20,000 retained): a sweep statement from the oldest entry %d buffers, from where the last ended %d", 2*passports, fullBuf, boundBuf)
	require.EqualValues(t, 500, n, "the bounded sweep deletes the rows past retention")
	// The bounded statement reads the 500 rows it deletes and the swept
	// rows of the last 10 s (the margin); the other one every swept row.
	require.Less(t, boundBuf*2, fullBuf, "the bounded sweep skips the entries of the rows it deleted")
}

// sweepBuffers runs the sweep's statement from from under EXPLAIN ANALYZE in
// a transaction it rolls back, and returns the buffers it touched.
func sweepBuffers(ctx context.Context, t *testing.T, b *outboxBundle, limit int, from time.Time) int64 {
	t.Helper()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []byte
	require.NoError(t, tx.QueryRow(ctx, `explain (analyze, buffers, format json) `+store.DeletePublishedSQL,
		time.Hour.Microseconds(), limit, from).Scan(&plan))
	var p []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	require.NoError(t, json.Unmarshal(plan, &p))
	return p[0].Plan.Hit + p[0].Plan.Read
}
