package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// The package's TestMain (testenv.Main) is in outbox_main_test.go.

// contractColumns are the columns of docs/contract.md §3 that operators and
// runbooks query; the migrations may add more, never fewer.
var contractColumns = map[string][]string{
	"route_passports": {
		"route_id", "route_name_full", "route_name_short", "ka_short", "ka_full",
		"orbit_number", "orbit_state", "interval_begin", "interval_end",
		"roll_angle_min", "roll_angle_max", "visir_angle_min", "visir_angle_max",
		"resolution_range", "resolution_azimuth", "polarisation", "processing_level",
		"geometry_wkt", "route_status", "trace_id", "correlation_id", "source_topic",
		"source_partition", "source_offset", "source_key", "raw_payload",
		"created_at", "updated_at",
	},
	"route_passport_outbox": {
		"id", "route_id", "event_type", "topic", "message_key", "payload", "headers",
		"status", "attempts", "max_attempts", "next_attempt_at", "locked_until",
		"last_error", "created_at", "updated_at", "published_at",
	},
}

// contractTypes pins the column types the contract names.
var contractTypes = map[string]map[string]string{
	"route_passports": {
		"route_id":       "uuid",
		"interval_begin": "timestamp with time zone",
		"interval_end":   "timestamp with time zone",
		"polarisation":   "jsonb",
		"raw_payload":    "jsonb",
	},
	"route_passport_outbox": {
		"id":      "uuid",
		"payload": "jsonb",
		"headers": "jsonb",
	},
}

type migrateBundle struct {
	conn *pgx.Conn
}

func setupMigrate(t *testing.T) (context.Context, *migrateBundle) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.EmptyDatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, &migrateBundle{conn: conn}
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("LargeDocumentsUseLZ4", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupMigrate(t)
		require.NoError(t, store.Migrate(ctx, bundle.conn))
		// pglz compression of TOASTed documents took half of the server's
		// CPU in the ingest benchmark (migration 005).
		for _, c := range [][2]string{{"route_passports", "raw_payload"}, {"route_passports", "geometry_wkt"}, {"route_passport_outbox", "payload"}} {
			var method string
			require.NoError(t, bundle.conn.QueryRow(ctx, `select attcompression::text from pg_attribute
				where attrelid = $1::regclass and attname = $2`, c[0], c[1]).Scan(&method))
			require.Equal(t, "l", method, "compression of %s.%s", c[0], c[1])
		}
	})

	t.Run("OutboxStorageForSteadyState", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupMigrate(t)
		require.NoError(t, store.Migrate(ctx, bundle.conn))
		// Migration 006: payloads out of line (claims and marks copy a
		// small heap tuple) and autovacuum by a fixed number of dead rows,
		// unthrottled, for the outbox heap and its TOAST table (issue 12).
		var heap, toast []string
		require.NoError(t, bundle.conn.QueryRow(ctx, `select coalesce(c.reloptions, '{}'), coalesce(tc.reloptions, '{}')
			from pg_class c join pg_class tc on tc.oid = c.reltoastrelid
			where c.oid = 'route_passport_outbox'::regclass`).Scan(&heap, &toast))
		for _, o := range []string{"toast_tuple_target=128", "autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_insert_scale_factor=0", "autovacuum_vacuum_cost_delay=0"} {
			require.Contains(t, heap, o)
		}
		for _, o := range []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_cost_delay=0"} {
			require.Contains(t, toast, o)
		}
	})

	t.Run("OutboxAnalyzeSamplesFewRows", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupMigrate(t)
		require.NoError(t, store.Migrate(ctx, bundle.conn))
		// Migration 008: ANALYZE samples 300 rows per unit of the largest
		// target among the columns, so one column at the default (100)
		// makes it read 30,000 rows of the outbox again.
		rows, err := bundle.conn.Query(ctx, `select attname::text, coalesce(attstattarget, -1)::int from pg_attribute
			where attrelid = 'route_passport_outbox'::regclass and attnum > 0 and not attisdropped order by attnum`)
		require.NoError(t, err)
		targets, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Name   string
			Target int
		}])
		require.NoError(t, err)
		require.NotEmpty(t, targets)
		for _, c := range targets {
			require.True(t, c.Target >= 0 && c.Target <= 10,
				"statistics target of route_passport_outbox.%s is %d: every column of the outbox needs one of at most 10 (migration 008)", c.Name, c.Target)
		}
	})

	t.Run("CreatesContractTables", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupMigrate(t)
		require.NoError(t, store.Migrate(ctx, bundle.conn))

		for table, want := range contractColumns {
			got := columns(ctx, t, bundle.conn, table)
			for _, col := range want {
				require.Contains(t, got, col, "column %s.%s (contract §3)", table, col)
			}
			for col, typ := range contractTypes[table] {
				require.Equal(t, typ, got[col], "type of %s.%s", table, col)
			}
		}
		require.NotEmpty(t, columns(ctx, t, bundle.conn, "outbox_relay_control"))

		var pk string
		require.NoError(t, bundle.conn.QueryRow(ctx, `
			select a.attname from pg_index i
			join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
			where i.indrelid = 'route_passports'::regclass and i.indisprimary`).Scan(&pk))
		require.Equal(t, "route_id", pk)

		var unique bool
		require.NoError(t, bundle.conn.QueryRow(ctx, `
			select exists (
				select 1 from pg_constraint c
				where c.conrelid = 'route_passport_outbox'::regclass and c.contype = 'u'
				  and (select array_agg(a.attname::text order by a.attname) from pg_attribute a
				       where a.attrelid = c.conrelid and a.attnum = any(c.conkey))
				      = array['event_type', 'route_id'])`).Scan(&unique))
		require.True(t, unique, "unique (route_id, event_type) on route_passport_outbox")
	})

	t.Run("SecondRunChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupMigrate(t)
		require.NoError(t, store.Migrate(ctx, bundle.conn))
		before := schemaVersion(ctx, t, bundle.conn)
		require.Positive(t, before)
		colsBefore := columns(ctx, t, bundle.conn, "route_passport_outbox")

		require.NoError(t, store.Migrate(ctx, bundle.conn))
		require.Equal(t, before, schemaVersion(ctx, t, bundle.conn))
		require.Equal(t, colsBefore, columns(ctx, t, bundle.conn, "route_passport_outbox"))

		var controlRows int
		require.NoError(t, bundle.conn.QueryRow(ctx, `select count(*) from outbox_relay_control`).Scan(&controlRows))
		require.Equal(t, 1, controlRows, "the control row is seeded once")
	})

	t.Run("MigrateURL", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		u := testenv.EmptyDatabaseURL(t)
		m, err := store.MigrateURL(ctx, u, nil)
		require.NoError(t, err)
		version, err := store.SchemaVersion()
		require.NoError(t, err)
		want := int32(version)
		require.Equal(t, store.Migration{From: 0, To: want}, m)
		m, err = store.MigrateURL(ctx, u, nil)
		require.NoError(t, err)
		require.Equal(t, store.Migration{From: want, To: want}, m)
		// The pool settings the README allows in DATABASE_URL are not
		// server parameters: migrate must not send them.
		_, err = store.MigrateURL(ctx, withPoolSettings(u), nil)
		require.NoError(t, err)

		// A later release's schema (a rollback runs this release's
		// migration hook on it): left alone, no error.
		pool, err := store.Open(ctx, u, "test")
		require.NoError(t, err)
		defer pool.Close()
		_, err = pool.Exec(ctx, "update schema_version set version = version + 1")
		require.NoError(t, err)
		m, err = store.MigrateURL(ctx, u, nil)
		require.NoError(t, err, "a newer schema is left as it is")
		require.True(t, m.Newer())
		require.Equal(t, want+1, m.From)
		require.NoError(t, store.NewPassports(pool, 1).CheckSchema(ctx), "a newer schema serves this build")
	})
}

// Two migrate runs at once on a fresh database (two pods' init containers)
// both succeed. They met in tern's lock, where the waiting one held a
// snapshot that the other's CREATE INDEX CONCURRENTLY waited for, and
// PostgreSQL failed one of them as a deadlock nearly every time.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	version, err := store.SchemaVersion()
	require.NoError(t, err)
	for round := range 3 {
		u := testenv.EmptyDatabaseURL(t)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = store.MigrateURL(ctx, u, nil)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, run %d", round, i)
		}
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		require.Equal(t, version, schemaVersion(ctx, t, conn), "round %d", round)
		var invalid int
		require.NoError(t, conn.QueryRow(ctx, `select count(*) from pg_index where not indisvalid`).Scan(&invalid))
		require.Zero(t, invalid, "no invalid index left, round %d", round)
		require.NoError(t, conn.Close(ctx))
	}
}

// A migrate run waiting for another's lock says who holds it (the holder's
// pid, application and client), then migrates once the lock is free. It
// said nothing for up to its 5-minute bound before.
func TestMigrateReportsTheLockHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := testenv.EmptyDatabaseURL(t)
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "stuck-migrate"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer holder.Close(ctx)
	_, err = holder.Exec(ctx, "select pg_advisory_lock($1)", store.MigrateLockKey)
	require.NoError(t, err)

	type report struct {
		holder store.MigrateLockHolder
		waited time.Duration
	}
	reports := make(chan report, 10)
	done := make(chan error, 1)
	go func() {
		_, err := store.MigrateURL(ctx, u, &store.MigrateReports{Waiting: func(h store.MigrateLockHolder, waited time.Duration) {
			reports <- report{h, waited}
		}})
		done <- err
	}()

	var r report
	select {
	case r = <-reports:
	case err := <-done:
		t.Fatalf("migrate ended (%v) while another session held its lock", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the lock's holder within 10 s")
	}
	require.Equal(t, int32(holder.PgConn().PID()), r.holder.PID)
	require.Equal(t, "stuck-migrate", r.holder.Application)
	require.NotEmpty(t, r.holder.Client, "a TCP or Unix-socket client")
	require.Less(t, r.waited, 5*time.Second, "the first report comes at the first refusal")

	_, err = holder.Exec(ctx, "select pg_advisory_unlock($1)", store.MigrateLockKey)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("migrate did not finish within 60 s of the lock's release")
	}
	require.Empty(t, reports, "one report within the first %s", store.MigrateWaitReport)
}

// TestMigrateLockHolderIsOfThisDatabase: an advisory lock is per database.
// A run migrating another database of the same cluster holds the same key
// without blocking this one, and is not named as this one's holder.
func TestMigrateLockHolderIsOfThisDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	connect := func(u, app string) *pgx.Conn { return connectAs(ctx, t, u, app) }
	other := connect(testenv.EmptyDatabaseURL(t), "other-database")
	_, err := other.Exec(ctx, "select pg_advisory_lock($1)", store.MigrateLockKey)
	require.NoError(t, err)

	u := testenv.EmptyDatabaseURL(t)
	asker := connect(u, "asker")
	h, found := store.FindMigrateLockHolder(ctx, asker)
	require.False(t, found, "the lock of another database's run (pid %d) is not this database's: got pid %d (%s)",
		other.PgConn().PID(), h.PID, h.Application)

	holder := connect(u, "this-database")
	_, err = holder.Exec(ctx, "select pg_advisory_lock($1)", store.MigrateLockKey)
	require.NoError(t, err)
	h, found = store.FindMigrateLockHolder(ctx, asker)
	require.True(t, found)
	require.Equal(t, int32(holder.PgConn().PID()), h.PID)
	require.Equal(t, "this-database", h.Application)
}

// A migration that waits for a table lock (007's ALTER TABLE of
// outbox_relay_control, behind a transaction that read the table) gives up
// after lock_timeout and is tried again, so that the service's statements
// on the table, queued behind its request, wait at most that long; the run
// says so, naming the session it waited for, and completes once that
// session is gone. It waited up to its 5-minute bound before, and every
// relay claim with it.
func TestMigrateGivesUpTableLockWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := testenv.EmptyDatabaseURL(t)
	admin := connectAs(ctx, t, u, "test-admin")
	// From version 3, the run goes through 004, which runs with
	// lock_timeout 0 for the session, and 007 must still get its own.
	require.NoError(t, store.MigrateTo(ctx, admin, 3))

	// The lock a read of the table holds to its transaction's end. Taken
	// by LOCK TABLE, the transaction holds no snapshot, which 004's CREATE
	// INDEX CONCURRENTLY would wait for (TestMigrateConcurrentBuildWaitsForOldSnapshots).
	holder := connectAs(ctx, t, u, "long-reader")
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "lock table outbox_relay_control in access share mode")
	require.NoError(t, err)
	var paused bool

	retries := make(chan store.MigrateRetry, 100)
	done := make(chan error, 1)
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() {
		_, err := store.MigrateURL(runCtx, u, &store.MigrateReports{Retrying: func(r store.MigrateRetry) { retries <- r }})
		done <- err
	}()
	awaitLockWait(ctx, t, admin, done, `select exists (select 1 from pg_locks
		where relation = 'outbox_relay_control'::regclass and mode = 'AccessExclusiveLock' and not granted)`)

	// (a) A relay's read of the table, queued behind the migration.
	reader := connectAs(ctx, t, u, "outbox-relay")
	bound := store.MigrateLockTimeout + 2*time.Second
	readCtx, readCancel := context.WithTimeout(ctx, bound+3*time.Second)
	defer readCancel()
	start := time.Now()
	err = reader.QueryRow(readCtx, "select paused from outbox_relay_control").Scan(&paused)
	took := time.Since(start)
	require.NoError(t, err, "a read of outbox_relay_control (every relay claim's) still waited behind the migration after %s", took.Round(time.Millisecond))
	require.Less(t, took, bound, "a read of outbox_relay_control waited behind the migration")
	t.Logf("the read waited %s behind the migration (lock_timeout %s)", took.Round(time.Millisecond), store.MigrateLockTimeout)
	// The binaries probe a call outstanding for a second, and take one
	// queued behind another application's lock for an outage: a wait of
	// that length would pause the ingestor and turn it not ready at every
	// try (at a 3-s lock_timeout it did).
	require.Less(t, took, time.Second, "the read waited long enough behind the migration for the binaries' stall checks to call the database down")

	// (c) The try that gave up is reported, with the session it waited for.
	var r store.MigrateRetry
	select {
	case r = <-retries:
	case err := <-done:
		t.Fatalf("migrate ended (%v) while a transaction held the table it alters", err)
	case <-time.After(2*store.MigrateLockTimeout + 5*time.Second):
		t.Fatal("no retry reported")
	}
	require.Equal(t, "007_outbox_maintenance_lease.sql", r.Migration)
	require.Equal(t, 1, r.Tries)
	require.Positive(t, r.Next)
	var pids []int
	for _, b := range r.Blockers {
		pids = append(pids, b.PID)
	}
	require.Contains(t, pids, int(holder.PgConn().PID()), "the report names the session the migration waited for")

	// (b) Once the reader's transaction ends, the run completes.
	require.NoError(t, tx.Rollback(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("migrate did not finish within a minute of the lock's release")
	}
	version, err := store.SchemaVersion()
	require.NoError(t, err)
	require.Equal(t, version, schemaVersion(ctx, t, admin))
}

// Migration 004 builds its index CONCURRENTLY, which waits for every older
// transaction (a long report's snapshot) and blocks none of the service's
// statements: it waits without lock_timeout, rather than failing at every
// long reader and building its index again at every try; and without a
// statement_timeout a role or database may set for the service (one just
// above INGEST_DB_TIMEOUT, as the README suggests), which cancelled the
// build at every try (57014).
func TestMigrateConcurrentBuildWaitsForOldSnapshots(t *testing.T) {
	t.Parallel()
	for _, statementTimeout := range []string{"", "300ms"} {
		t.Run("statement_timeout="+statementTimeout, func(t *testing.T) {
			t.Parallel()
			testConcurrentBuildWaits(t, statementTimeout)
		})
	}
}

func testConcurrentBuildWaits(t *testing.T, statementTimeout string) {
	ctx := context.Background()
	u := testenv.EmptyDatabaseURL(t)
	admin := connectAs(ctx, t, u, "test-admin")
	require.NoError(t, store.MigrateTo(ctx, admin, 3))
	if statementTimeout != "" {
		// For the sessions that start from now: the migrate run's.
		var db string
		require.NoError(t, admin.QueryRow(ctx, "select current_database()").Scan(&db))
		_, err := admin.Exec(ctx, fmt.Sprintf("alter database %s set statement_timeout = '%s'", pgx.Identifier{db}.Sanitize(), statementTimeout))
		require.NoError(t, err)
	}

	holder := connectAs(ctx, t, u, "report")
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "select 1") // takes the transaction's snapshot
	require.NoError(t, err)

	retries := make(chan store.MigrateRetry, 100)
	done := make(chan error, 1)
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() {
		_, err := store.MigrateURL(runCtx, u, &store.MigrateReports{Retrying: func(r store.MigrateRetry) { retries <- r }})
		done <- err
	}()
	awaitLockWait(ctx, t, admin, done, `select exists (select 1 from pg_stat_activity
		where datname = current_database() and application_name = '`+store.MigrateApplication+`' and wait_event_type = 'Lock')`)
	select {
	case r := <-retries:
		t.Fatalf("migration %s gave up waiting for an older transaction (try %d)", r.Migration, r.Tries)
	case err := <-done:
		t.Fatalf("migrate ended (%v) while an older transaction was open", err)
	case <-time.After(store.MigrateLockTimeout + time.Second):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("migrate did not finish within a minute of the transaction's end")
	}
	require.Empty(t, retries)
	version, err := store.SchemaVersion()
	require.NoError(t, err)
	require.Equal(t, version, schemaVersion(ctx, t, admin))
}

// A migrate run bounds its migrations' lock waits (half a second) unless
// DATABASE_URL sets a lock_timeout, as a parameter or in options, as the
// server reads them; deadlock_timeout is another setting. The bound is not
// the session's: a session connected with no setting has the server's.
func TestMigrateLockTimeoutGivesWayToTheURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := testenv.DatabaseURL(t)
	for _, c := range []struct {
		params, session string
		bounded         bool
	}{
		{"", "0", true},
		{"lock_timeout=10s", "10s", false},
		{"LOCK_TIMEOUT=10s", "10s", false},
		{"options=-c%20lock_timeout%3D10s", "10s", false},
		{"options=-clock_timeout%3D10s", "10s", false},
		{"options=--lock-timeout%3D10s", "10s", false},
		// deadlock_timeout is a superuser's setting: not connected.
		{"options=-c%20deadlock_timeout%3D2s", "", true},
	} {
		cfg, err := store.MigrateConnConfig(withParam(u, c.params))
		require.NoError(t, err)
		require.Equal(t, c.bounded, store.MigrateBoundsLockWaits(cfg), "params %q", c.params)
		if c.session == "" {
			continue
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err, "params %q", c.params)
		var got string
		require.NoError(t, conn.QueryRow(ctx, "show lock_timeout").Scan(&got))
		require.NoError(t, conn.Close(ctx))
		require.Equal(t, c.session, got, "params %q", c.params)
	}
}

// TestMigrateThroughPgBouncer: a migrate run through PgBouncer (transaction
// pooling) brings an empty database to this build's version. PgBouncer
// refuses startup parameters it does not know: with lock_timeout among
// them every run failed to connect ("unsupported startup parameter").
func TestMigrateThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	pg.CreateDatabase(t, "migrate_bouncer", false)
	bouncer := testenv.NewPgBouncer(t, pg, testenv.PgBouncerOptions{})
	m, err := store.MigrateURL(ctx, bouncer.URL("migrate_bouncer"), nil)
	require.NoError(t, err)
	version, err := store.SchemaVersion()
	require.NoError(t, err)
	require.Equal(t, version, int(m.To))
	admin, err := pgx.Connect(ctx, pg.URL("migrate_bouncer"))
	require.NoError(t, err)
	defer admin.Close(ctx)
	require.Equal(t, version, schemaVersion(ctx, t, admin))
}

// TestMigrateRefusesATransactionPooler: through PgBouncer in transaction
// mode with its server connections handed out in turn (as a pool busy with
// the service's clients does), a migrate run's statements land on two
// backends. It refuses before migrating, naming both and the remedy, and
// releases the lock it took: a session lock left on a pooled server
// connection made the next run wait its 5 minutes and fail.
func TestMigrateRefusesATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	pg.CreateDatabase(t, "migrate_pooled", false)
	bouncer := testenv.NewPgBouncer(t, pg, testenv.PgBouncerOptions{RoundRobin: true})
	// Two server connections in the pool: two transactions at once.
	var warm []pgx.Tx
	for range 2 {
		c, err := pgx.Connect(ctx, bouncer.URL("migrate_pooled"))
		require.NoError(t, err)
		defer c.Close(ctx)
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "select 1")
		require.NoError(t, err)
		warm = append(warm, tx)
	}
	for _, tx := range warm {
		require.NoError(t, tx.Commit(ctx))
	}

	_, err := store.MigrateURL(ctx, bouncer.URL("migrate_pooled"), nil)
	var perr *store.PoolerError
	require.ErrorAs(t, err, &perr)
	require.NotEqual(t, perr.Backends[0], perr.Backends[1])
	require.True(t, perr.Released, "the lock reached again and released: %v", err)
	require.ErrorContains(t, err, "run migrate on a direct connection")

	direct, err := pgx.Connect(ctx, pg.URL("migrate_pooled"))
	require.NoError(t, err)
	defer direct.Close(ctx)
	var locks int
	require.NoError(t, direct.QueryRow(ctx, "select count(*) from pg_locks where locktype = 'advisory'").Scan(&locks))
	require.Zero(t, locks, "an advisory lock left held")
	var versionTable bool
	require.NoError(t, direct.QueryRow(ctx, "select to_regclass($1) is not null", store.VersionTable).Scan(&versionTable))
	require.False(t, versionTable, "migrated through the pooler")
}

// awaitLockWait polls query (one boolean) on conn until it is true, failing
// t after 30 s or if the migrate run ends (done) first.
func awaitLockWait(ctx context.Context, t *testing.T, conn *pgx.Conn, done <-chan error, query string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		require.NoError(t, conn.QueryRow(ctx, query).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("migrate ended (%v) before it waited for the lock", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("migrate did not wait for the lock within 30 s; this database's sessions:\n%s", sessions(ctx, t, conn))
		}
	}
}

// sessions lists the sessions of conn's database, what a test that waited
// in vain for a lock wait shows.
func sessions(ctx context.Context, t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(ctx, `select format('pid %s %s: %s, waits for %s %s: %s', pid, application_name, state,
			wait_event_type, wait_event, left(query, 120))
		from pg_stat_activity where datname = current_database() order by pid`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// connectAs connects to u with application_name app, closed at t's cleanup.
func connectAs(ctx context.Context, t *testing.T, u, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return conn
}

// withPoolSettings adds the pgxpool settings of the README's DATABASE_URL
// examples to u.
func withPoolSettings(u string) string {
	return withParam(u, "pool_max_conns=4&pool_health_check_period=5s")
}

// withParam adds query parameters (key=value&...) to the connection URL u.
func withParam(u, params string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + params
}

// openPool opens a pool (store.Open) on u with query parameters added,
// closed at t's cleanup.
func openPool(ctx context.Context, t *testing.T, u, params string) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(ctx, withParam(u, params), "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// columns maps each column of table to its data type.
func columns(ctx context.Context, t *testing.T, conn *pgx.Conn, table string) map[string]string {
	t.Helper()
	rows, err := conn.Query(ctx, `
		select column_name, data_type from information_schema.columns
		where table_schema = 'public' and table_name = $1`, table)
	require.NoError(t, err)
	out := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error {
		out[name] = typ
		return nil
	})
	require.NoError(t, err)
	return out
}

func schemaVersion(ctx context.Context, t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var v int
	require.NoError(t, conn.QueryRow(ctx, `select version from `+store.VersionTable).Scan(&v))
	return v
}
