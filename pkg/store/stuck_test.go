package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
)

// TestStuckLeavesOutTheReindexersWaits: the relay's REINDEX CONCURRENTLY
// waits for another application's transaction left idle, and Stuck (every
// relay's probe of a slow call) does not count that wait as a stuck call;
// a claim behind another application's table lock it does count.
func TestStuckLeavesOutTheReindexersWaits(t *testing.T) {
	ctx, b := setupOutbox(t)
	relaytest.Seed(t, b.pool, 100, "a", "b")
	require.NoError(t, b.outbox.Stuck(ctx), "nothing waits yet")

	cfg := b.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "psql"
	other, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close(context.Background()) })
	// whether a session of this pool waits for a lock in a statement
	// starting with prefix (in this database: the package's other query
	// modes run this test beside it). Asked through the pool, outside the
	// other session's transaction: within one, pg_stat_activity is read
	// once and kept.
	waiting := func(prefix string) bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = $1 and wait_event_type = 'Lock' and query like $2`,
			b.pool.Config().ConnConfig.RuntimeParams["application_name"], prefix+"%").Scan(&n))
		return n > 0
	}

	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `update route_passport_outbox set last_error = 'by hand' where id = (select id from route_passport_outbox limit 1)`)
	require.NoError(t, err)
	reindexed := make(chan error, 1)
	go func() { reindexed <- b.outbox.RebuildIndex(ctx, "route_passport_outbox_pending_idx") }()
	require.Eventually(t, func() bool { return waiting("reindex") }, 10*time.Second, 50*time.Millisecond, "the reindex waits for the idle transaction")
	require.NoError(t, b.outbox.Stuck(ctx), "only the reindexer waits")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-reindexed)

	// The control: a claim behind another application's table lock.
	tx, err = other.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `lock table route_passport_outbox in access exclusive mode`)
	require.NoError(t, err)
	claimed := make(chan error, 1)
	go func() { _, err := claim(ctx, b, 10, time.Minute); claimed <- err }()
	require.Eventually(t, func() bool { return waiting("") }, 10*time.Second, 50*time.Millisecond, "the claim waits for the table lock")
	require.Error(t, b.outbox.Stuck(ctx), "a claim waits behind another application's table lock")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-claimed)
}
