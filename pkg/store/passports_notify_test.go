package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// Both ways of writing notify the relay, and only once the write is
// committed. Nor does the setting that lets Write's notification commit
// without a WAL flush outlive it: the next transaction on the connection
// waits for its flush again.
func TestPassportsWritesNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testenv.Pool(t).Config().Copy()
	cfg.MaxConns = 1 // the setting's check below meets the writes' connection
	cfg.AfterConnect = withSetup(cfg.AfterConnect,
		// On for the session, whatever the test server's default: a
		// setting a write leaked would show.
		`set synchronous_commit = on`)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := store.NewPassports(pool, 3)
	l, err := pgx.Connect(ctx, pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	_, err = l.Exec(ctx, "listen "+store.NotifyChannel)
	require.NoError(t, err)

	for name, write := range bothWrites(ctx, s) {
		id := uuid.NewString()
		require.NoError(t, write(passportRecord(t, id, name, "t", 1)), name)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := l.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "%s: a notification", name)
		require.Equal(t, store.NotifyChannel, n.Channel, name)
		var rows int
		require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", id).Scan(&rows))
		require.Equal(t, 2, rows, "%s: the events are committed when the relay hears of them", name)
		var setting string
		require.NoError(t, pool.QueryRow(ctx, "show synchronous_commit").Scan(&setting))
		require.Equal(t, "on", setting, "%s: the next transaction on the connection", name)
	}
}

// Write's notification is a transaction of its own after the write's: a
// notification that fails (here: the writer may not notify) leaves the
// write committed, and Write reports success.
func TestPassportsWriteCommitsBeforeItNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)
	role := fmt.Sprintf("silent_writer_%d", time.Now().UnixNano())
	for _, q := range []string{
		`create role ` + role + ` nologin`,
		`grant ` + role + ` to current_user`,
		`grant select, insert, update on route_passports, route_passport_outbox to ` + role,
		`revoke execute on function pg_notify(text, text) from public`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `drop owned by `+role)
		_, _ = pool.Exec(context.Background(), `drop role `+role)
	})
	cfg := pool.Config().Copy()
	cfg.AfterConnect = withSetup(cfg.AfterConnect, `set role `+role)
	writer, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer writer.Close()
	_, err = writer.Exec(ctx, "select pg_notify($1, '')", store.NotifyChannel)
	require.ErrorContains(t, err, "permission denied", "the writer cannot notify")

	id := uuid.NewString()
	require.NoError(t, store.NewPassports(writer, 3).Write(ctx, []passport.Accepted{passportRecord(t, id, "silent", "t", 1)}))
	var passports, events int
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passports where route_id = $1", id).Scan(&passports))
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from route_passport_outbox where route_id = $1", id).Scan(&events))
	require.Equal(t, 1, passports, "the passport is committed")
	require.Equal(t, 2, events, "its events are committed")
}

// withSetup runs sql on each new connection after store.Open's own setup
// (after).
func withSetup(after func(context.Context, *pgx.Conn) error, sql string) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, c *pgx.Conn) error {
		if err := after(ctx, c); err != nil {
			return err
		}
		_, err := c.Exec(ctx, sql)
		return err
	}
}
