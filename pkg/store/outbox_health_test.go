package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
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

// TestOutboxTableHealthCountsIdleWriters: a read-committed transaction that
// has written and sits idle holds no snapshot (no backend_xmin) but its xid
// holds the horizon back all the same (the forgotten psql session); so
// does a prepared transaction. Both show as the oldest transaction's age.
func TestOutboxTableHealthCountsIdleWriters(t *testing.T) {
	t.Parallel()
	t.Run("idle in transaction", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `select pg_current_xact_id()`) // assigns the xid; no snapshot is kept after it
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond)
		h, err := b.outbox.TableHealth(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, h.OldestXactAge, time.Second, "the idle writer")
		require.NoError(t, tx.Rollback(ctx))
		h, err = b.outbox.TableHealth(ctx)
		require.NoError(t, err)
		require.Less(t, h.OldestXactAge, time.Second, "gone with it")
	})
	t.Run("another role's session", func(t *testing.T) {
		t.Parallel()
		// Read as a role without pg_read_all_stats (SET ROLE to a role
		// the test's own is granted, so no login of its own is needed):
		// the test role's session shows its xid but no time, so it is
		// listed undated.
		ctx, b := setupOutbox(t)
		role := fmt.Sprintf("health_reader_%d", time.Now().UnixNano())
		for _, q := range []string{`create role ` + role + ` nologin`, `grant ` + role + ` to current_user`} {
			_, err := b.pool.Exec(ctx, q)
			require.NoError(t, err, q)
		}
		t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), `drop role `+role) })
		cfg := b.pool.Config().Copy()
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `set role `+role)
			return err
		}
		reader, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer reader.Close()
		o := store.NewOutbox(reader)

		h, err := o.TableHealth(ctx)
		require.NoError(t, err)
		require.Empty(t, h.UndatedHolders, "nobody holds the horizon yet")
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var xid string
		require.NoError(t, tx.QueryRow(ctx, `select pg_current_xact_id()::text`).Scan(&xid))
		h, err = o.TableHealth(ctx)
		require.NoError(t, err)
		holds := func(hs []string) bool {
			return slices.ContainsFunc(hs, func(k string) bool { return strings.HasSuffix(k, ":"+xid) })
		}
		require.True(t, holds(h.UndatedHolders), "%v, xid %s", h.UndatedHolders, xid)
		require.NoError(t, tx.Rollback(ctx))
		h, err = o.TableHealth(ctx)
		require.NoError(t, err)
		require.False(t, holds(h.UndatedHolders), "gone with it: %v", h.UndatedHolders)
	})
	t.Run("prepared", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pg := testenv.NewPostgresCluster(t, testenv.PostgresOptions{Settings: map[string]string{"max_prepared_transactions": "2"}})
		pool, err := pgxpool.New(ctx, pg.CreateDatabase(t, "health", true))
		require.NoError(t, err)
		defer pool.Close()
		o := store.NewOutbox(pool)
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		for _, q := range []string{`begin`, `select pg_current_xact_id()`, `prepare transaction 'held'`} {
			_, err := conn.Exec(ctx, q)
			require.NoError(t, err, q)
		}
		time.Sleep(1500 * time.Millisecond)
		h, err := o.TableHealth(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, h.OldestXactAge, time.Second, "the prepared transaction")
		_, err = pool.Exec(ctx, `rollback prepared 'held'`)
		require.NoError(t, err)
		h, err = o.TableHealth(ctx)
		require.NoError(t, err)
		require.Less(t, h.OldestXactAge, time.Second, "gone with it")
	})
}

// TestOutboxTableHealthListsAStandbysFeedbackUndated: a hot standby with
// hot_standby_feedback holds the horizon at its oldest snapshot. Idle, it
// holds nothing, however long it has streamed (once its feedback caught up
// with the primary, not at all); with a snapshot held on the
// standby its walsender is listed undated (the relay dates each xmin value
// from when it first sees it), not aged from the start of streaming.
func TestOutboxTableHealthListsAStandbysFeedbackUndated(t *testing.T) {
	t.Parallel()
	rc := testenv.NewReplicatedCluster(t, testenv.PostgresOptions{Settings: map[string]string{"hot_standby_feedback": "on"}})
	url := rc.CreateDatabase(t, "feedback_horizon", true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	o := store.NewOutbox(pool)
	sender := func() string {
		var s string
		if err := pool.QueryRow(ctx, `select pid::text || ':' || backend_xmin::text from pg_stat_activity
			where backend_type = 'walsender' and backend_xmin is not null`).Scan(&s); err != nil {
			return ""
		}
		return s
	}
	require.Eventually(t, func() bool { return sender() != "" }, 20*time.Second, 200*time.Millisecond, "the standby's walsender shows its feedback xmin")
	time.Sleep(6 * time.Second) // streaming, nothing open anywhere
	h, err := o.TableHealth(ctx)
	require.NoError(t, err)
	require.Less(t, h.OldestXactAge, 2*time.Second, "nothing is held: the walsender is not aged from the start of streaming")
	require.Eventually(t, func() bool {
		h, err = o.TableHealth(ctx)
		require.NoError(t, err)
		return len(h.UndatedHolders) == 0
	}, 30*time.Second, 500*time.Millisecond, "once its feedback caught up with the idle primary, the walsender holds nothing (it would otherwise age unchanged)")

	standby, err := pgx.Connect(ctx, rc.Standby.URL("feedback_horizon"))
	require.NoError(t, err)
	t.Cleanup(func() { standby.Close(context.Background()) })
	tx, err := standby.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, `select count(*) from route_passport_outbox`).Scan(&n)) // the standby's snapshot
	require.Eventually(t, func() bool {
		relaytest.MustInsert(t, pool, outbox.Event{Topic: "t"}) // the primary moves on; the standby's xmin stays
		h, err = o.TableHealth(ctx)
		require.NoError(t, err)
		s := sender()
		pid, _, _ := strings.Cut(s, ":")
		return s != "" && slices.ContainsFunc(h.UndatedHolders, func(k string) bool { return strings.HasPrefix(k, pid+":") })
	}, 30*time.Second, 500*time.Millisecond, "the walsender, holding the standby's snapshot, among the undated holders")
	require.Less(t, h.OldestXactAge, 2*time.Second, "dated by the relay, not here")
}

// TestOutboxTableHealthLiveTuplesSurviveAFailover: a promoted standby (as
// crash recovery) starts its statistics from nothing, and n_live_tup then
// counts only the rows written since; read as the live tuples, the bloat
// and bytes-per-row alerts fired after every failover (a review measured 0
// live against 60,000 dead on a table of 200,000 rows after a crash). The
// live tuples stay near the table's rows.
func TestOutboxTableHealthLiveTuplesSurviveAFailover(t *testing.T) {
	t.Parallel()
	rc := testenv.NewReplicatedCluster(t, testenv.PostgresOptions{})
	url := rc.CreateDatabase(t, "live_after_failover", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	count := func(pool *pgxpool.Pool) (rows int64, h outbox.TableHealth) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `select count(*) from route_passport_outbox`).Scan(&rows))
		h, err := store.NewOutbox(pool).TableHealth(ctx)
		require.NoError(t, err)
		return rows, h
	}

	primary, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	relaytest.Seed(t, primary, 2000, "a", "b")
	_, err = primary.Exec(ctx, `vacuum analyze route_passport_outbox`)
	require.NoError(t, err)
	rows, h := count(primary)
	require.InDelta(t, rows, h.LiveTuples, float64(rows)/10, "before the failover")
	var lsn string
	require.NoError(t, primary.QueryRow(ctx, `select pg_current_wal_lsn()::text`).Scan(&lsn))
	primary.Close()

	standby, err := store.Open(ctx, rc.Standby.URL("live_after_failover"), "test")
	require.NoError(t, err)
	t.Cleanup(standby.Close)
	require.Eventually(t, func() bool {
		var caught bool
		require.NoError(t, standby.QueryRow(ctx, `select pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&caught))
		return caught
	}, 30*time.Second, 100*time.Millisecond, "the standby replayed the seed and the vacuum")
	rc.KillPrimary(t)
	rc.Promote(t)
	relaytest.Seed(t, standby, 10, "a", "b")
	time.Sleep(1500 * time.Millisecond) // past the statistics' 1-s flush interval
	rows, h = count(standby)
	require.InDelta(t, rows, h.LiveTuples, float64(rows)/10, "after the failover")
}
