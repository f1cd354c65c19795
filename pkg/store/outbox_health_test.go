package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
)

// TestOutboxTableHealth: a REPEATABLE READ snapshot held open shows as the
// oldest transaction's age, growing while it lives and gone after it; the
// table's tuple counts and size are read.
func TestOutboxTableHealth(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})

	h, err := b.outbox.TableHealth(ctx)
	require.NoError(t, err)
	require.Less(t, h.OldestXactAge, time.Second, "no long transaction yet")
	require.Positive(t, h.TableBytes)

	tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, `select count(*) from route_passport_outbox`).Scan(&n)) // takes the snapshot
	time.Sleep(1500 * time.Millisecond)
	h1, err := b.outbox.TableHealth(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, h1.OldestXactAge, time.Second, "the held snapshot")
	time.Sleep(500 * time.Millisecond)
	h2, err := b.outbox.TableHealth(ctx)
	require.NoError(t, err)
	require.Greater(t, h2.OldestXactAge, h1.OldestXactAge, "it grows while held")
	require.NoError(t, tx.Rollback(ctx))

	_, err = b.pool.Exec(ctx, `delete from route_passport_outbox`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := b.outbox.TableHealth(ctx)
		require.NoError(t, err)
		return h.OldestXactAge < time.Second && h.DeadTuples >= 2
	}, 30*time.Second, 200*time.Millisecond, "the snapshot released; the deleted rows counted dead")
}
