package ingest_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/testenv"
)

// adminConn is a connection of the test's own to its database, opened
// before any ALTER DATABASE ... SET, so it keeps read-write defaults.
func adminConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// alterDatabase runs `alter database <conn's database> <change>` (e.g.
// "set statement_timeout = '300ms'") and ends every other session on the
// database, so that new sessions pick the change up.
func alterDatabase(t *testing.T, conn *pgx.Conn, change string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), "alter database "+pgx.Identifier{conn.Config().Database}.Sanitize()+" "+change)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(),
		"select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()")
	require.NoError(t, err)
}

// A database that answers pings but refuses writes (read-only) is an
// outage until writes succeed again: not ready the whole time, nothing
// dead-lettered, every record written once afterwards.
func TestDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, 2, "")
	ctx := context.Background()
	admin := adminConn(t, b.dbURL)
	r := b.start(t, func(c *ingest.Config) { c.MaxBackoff = time.Second })

	var all []testenv.Record
	produce := func(n int) {
		recs, _ := validRecords(t, n)
		all = append(all, testenv.Produce(t, b.bootstrap, b.topic, recs...)...)
	}
	produce(20)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)

	alterDatabase(t, admin, "set default_transaction_read_only = on")
	produce(20)
	require.Eventually(t, func() bool { return r.readyz(t) != http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	// Many probe periods: pings succeed meanwhile.
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); {
		produce(3)
		require.NotEqual(t, http.StatusOK, r.readyz(t), "ready while writes fail")
		time.Sleep(300 * time.Millisecond)
	}
	var ro string
	require.NoError(t, b.pool.QueryRow(ctx, "show transaction_read_only").Scan(&ro))
	require.Equal(t, "on", ro, "the database was read-only all along")

	alterDatabase(t, admin, "reset default_transaction_read_only")
	b.waitCommitted(t, endOffsets(all), 90*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, r.stop(t))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic), "nothing dead-lettered")
	require.Equal(t, len(all), b.count(t, "select count(*) from route_passports"))
	require.Equal(t, 2*len(all), b.count(t, "select count(*) from route_passport_outbox"))
}

// A write that hangs (here: on a table lock) times out after
// Config.DBTimeout and counts as an outage; it goes through once the
// lock is gone.
func TestDatabaseWriteTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	ctx := context.Background()
	admin := adminConn(t, b.dbURL)
	r := b.start(t, func(c *ingest.Config) { c.DBTimeout = time.Second; c.MaxBackoff = time.Second })

	b.warmUp(t, r, 10)

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "lock table route_passports in access exclusive mode")
	require.NoError(t, err)
	recs, _ := validRecords(t, 10)
	second := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	require.Eventually(t, func() bool { return r.readyz(t) != http.StatusOK }, 20*time.Second, 50*time.Millisecond,
		"a hanging write is reported")
	require.NoError(t, tx.Rollback(ctx))

	b.waitCommitted(t, endOffsets(second), 60*time.Second)
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, r.stop(t))
	require.Equal(t, 20, b.count(t, "select count(*) from route_passports"))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic))
}
