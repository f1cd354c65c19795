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
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// setReadOnlyDefault sets default_transaction_read_only for the new
// sessions of url's database, on a connection of its own, in a transaction
// that may write whatever that default is.
func setReadOnlyDefault(t *testing.T, url, on string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var db string
	require.NoError(t, conn.QueryRow(ctx, "select current_database()").Scan(&db))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "alter database "+pgx.Identifier{db}.Sanitize()+" set default_transaction_read_only = "+on)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// A session refused as read-only (the database's default for new sessions
// set read-only, its sessions ended) is closed, not handed out again: once
// the setting is reset, without anyone ending the read-only sessions, the
// relay's claim and the ingestor's chained write succeed on new sessions.
// Before, the pool kept them until their maximum lifetime (an hour).
func TestReadOnlySessionIsNotKept(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.DatabaseURL(t)
	pool := openPool(ctx, t, url, "pool_max_conns=1")
	ob := store.NewOutbox(pool)
	ps := store.NewPassports(pool, 3)
	relaytest.MustInsert(t, pool, outbox.Event{Topic: "t"})

	setReadOnlyDefault(t, url, "on")
	t.Cleanup(func() { setReadOnlyDefault(t, url, "off") })
	_, err := pool.Exec(ctx, "select pg_terminate_backend(pg_backend_pid())")
	require.Error(t, err, "the pool's one session ended")
	_, _, err = ob.Claim(ctx, 10, 0, time.Minute)
	require.ErrorContains(t, err, "25006")
	tx, err := ps.BeginWrite(ctx, []passport.Accepted{passportRecord(t, uuid.NewString(), "ro", "t1", 1)}, 0)
	if err == nil {
		_ = tx.Rollback(ctx)
	}
	require.ErrorContains(t, err, "25006")

	setReadOnlyDefault(t, url, "off")
	rows, _, err := ob.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err, "a new session claims")
	require.Len(t, rows, 1)
	tx, err = ps.BeginWrite(ctx, []passport.Accepted{passportRecord(t, uuid.NewString(), "rw", "t1", 2)}, 0)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// Calls one after another share one connection: the pool gets each back
// before the next call. With an AfterRelease hook pgxpool returns
// connections through a goroutine, and back-to-back calls opened new ones
// up to the pool's maximum.
func TestPoolReusesTheConnectionOfACallJustDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := openPool(ctx, t, testenv.DatabaseURL(t), "pool_max_conns=8")
	for range 50 {
		_, err := pool.Exec(ctx, "select 1")
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, pool.Stat().NewConnsCount(), "connections opened for 50 calls in a row")
}

// A session that has only read while the database was read-only is as
// read-only as the one refused a write: once one write of the pool is
// refused, every session opened before is closed instead of handed out, so
// that after the reset no write fails. Before, each such session failed
// one write after the reset.
func TestReadOnlyRefusalRetiresTheSessionsThatOnlyRead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.DatabaseURL(t)
	pool := openPool(ctx, t, url, "pool_max_conns=2")
	ob := store.NewOutbox(pool)
	relaytest.MustInsert(t, pool, outbox.Event{Topic: "t"})
	relaytest.MustInsert(t, pool, outbox.Event{Topic: "t"})

	setReadOnlyDefault(t, url, "on")
	t.Cleanup(func() { setReadOnlyDefault(t, url, "off") })
	// Two read-only sessions: both read, one is then refused a write.
	terminateAll(ctx, t, url, pool)
	a, err := pool.Acquire(ctx)
	require.NoError(t, err)
	b, err := pool.Acquire(ctx)
	require.NoError(t, err)
	for _, c := range []*pgxpool.Conn{a, b} {
		var ro string
		require.NoError(t, c.QueryRow(ctx, "show transaction_read_only").Scan(&ro))
		require.Equal(t, "on", ro, "a session opened while the database is read-only")
	}
	b.Release()
	_, err = a.Exec(ctx, "update route_passport_outbox set attempts = attempts")
	require.ErrorContains(t, err, "25006")
	a.Release()
	opened := pool.Stat().NewConnsCount()

	setReadOnlyDefault(t, url, "off")
	// Both held at once, so that neither can be the other's new session.
	c1, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c2, err := pool.Acquire(ctx)
	require.NoError(t, err)
	errs := make([]error, 2)
	for i, c := range []*pgxpool.Conn{c1, c2} {
		_, errs[i] = c.Exec(ctx, "update route_passport_outbox set attempts = attempts")
	}
	c1.Release()
	c2.Release()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.EqualValues(t, opened+2, pool.Stat().NewConnsCount(), "both read-only sessions replaced")
	rows, _, err := ob.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 2)
}

// terminateAll ends every session of url's database (from a connection of
// its own) and resets pool, so that the pool's next connections start
// under the database's settings of now.
func terminateAll(ctx context.Context, t *testing.T, url string, pool *pgxpool.Pool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid()`)
	require.NoError(t, err)
	pool.Reset()
}
