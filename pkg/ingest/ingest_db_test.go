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
	// The test's own pool: its session just ended, and pgxpool pings only
	// a connection idle for a second before handing it out (the ingestor
	// recovering at once, b.count came sooner than that).
	b.pool.Reset()
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

// A batch that shares no route with the batch ahead of it, still writing,
// commits without waiting for it. Here the batch ahead waits for a row
// lock held by a session of the ingestor's own application (so the wait
// is ordering, not an outage), and the next record, of another route, is
// written meanwhile; no offset is committed past the waiting record.
func TestBatchOfOtherRoutesCommitsWhileTheBatchAheadWaits(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	ctx := context.Background()
	r := b.start(t)
	_, ids := b.warmUp(t, r, 1)

	holder, err := b.pool.Begin(ctx) // application_name route-passport-ingestor, as the ingestor's
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	_, err = holder.Exec(ctx, "select 1 from route_passports where route_id = $1 for update", ids[0])
	require.NoError(t, err)

	first := testenv.Produce(t, b.bootstrap, b.topic,
		testenv.Record{Key: []byte(ids[0]), Value: passportValue(t, ids[0], "route 0, amended")})
	require.Eventually(t, func() bool {
		return b.count(t, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = 'route-passport-ingestor'
			  and wait_event_type = 'Lock'`) == 1
	}, 20*time.Second, 20*time.Millisecond, "the amendment waits for the held row")

	recs, others := validRecords(t, 1)
	second := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	require.Eventually(t, func() bool {
		return b.count(t, "select count(*) from route_passports where route_id = $1", others[0]) == 1
	}, 20*time.Second, 20*time.Millisecond, "the other route is written while the batch ahead waits")
	require.LessOrEqual(t, b.committed(t)[0], first[0].Offset, "no offset committed past the waiting record")

	require.NoError(t, holder.Rollback(ctx))
	b.waitCommitted(t, endOffsets(second), 60*time.Second)
	require.Equal(t, 1, b.count(t,
		"select count(*) from route_passports where route_id = $1 and route_name_full = 'route 0, amended'", ids[0]))
	require.NoError(t, r.stop(t))
	require.Empty(t, testenv.ReadAll(t, b.bootstrap, b.dlqTopic))
}
