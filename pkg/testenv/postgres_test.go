package testenv_test

import (
	"context"
	"io/fs"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/db"
	"github.com/pcp/route-processing/pkg/testenv"
)

// migrationCount is the version the embedded migrations bring a database to.
func migrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(db.Migrations, "migrations/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return len(files)
}

func TestDatabaseIsolation(t *testing.T) {
	t.Parallel()

	// Both subtests write before either reads, so each read happens while
	// the other database holds a row.
	var wrote sync.WaitGroup
	wrote.Add(2)
	allWrote := make(chan struct{})
	go func() { wrote.Wait(); close(allWrote) }()

	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := testenv.Pool(t)

			_, err := pool.Exec(ctx, `create table isolation_probe (owner text not null)`)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `insert into isolation_probe (owner) values ($1)`, name)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `update outbox_relay_control set paused = true, reason = $1`, name)
			require.NoError(t, err)
			wrote.Done()
			select {
			case <-allWrote:
			case <-time.After(30 * time.Second):
				t.Log("the other subtest did not write within 30s (-parallel 1?); checking anyway")
			}

			var owners []string
			rows, err := pool.Query(ctx, `select owner from isolation_probe`)
			require.NoError(t, err)
			owners, err = pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{name}, owners)

			var reason string
			require.NoError(t, pool.QueryRow(ctx, `select reason from outbox_relay_control`).Scan(&reason))
			require.Equal(t, name, reason)
		})
	}
}

func TestSharedDatabaseIsMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Pool(t)

	for _, table := range []string{"route_passports", "route_passport_outbox", "outbox_relay_control"} {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, `select to_regclass($1) is not null`, "public."+table).Scan(&exists))
		require.True(t, exists, "table %s", table)
	}
	var version int
	require.NoError(t, pool.QueryRow(ctx, `select version from schema_version`).Scan(&version))
	require.Equal(t, migrationCount(t), version)
	var paused bool
	require.NoError(t, pool.QueryRow(ctx, `select paused from outbox_relay_control`).Scan(&paused))
	require.False(t, paused, "the seed row of migration 003 is there")
}

func TestEmptyDatabaseURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.EmptyDatabaseURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)

	var n int
	require.NoError(t, conn.QueryRow(ctx, `select count(*) from pg_tables where schemaname = 'public'`).Scan(&n))
	require.Zero(t, n)
}

func TestPostgresClusterStopStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	u := c.CreateDatabase(t, "stopstart", true)

	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `update outbox_relay_control set reason = 'kept'`)
	require.NoError(t, err)

	start := time.Now()
	c.Stop(t)
	t.Logf("stop took %s", time.Since(start))

	// The open connection is gone, and new ones are refused.
	require.Error(t, conn.Ping(ctx))
	conn.Close(ctx)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pgx.Connect(cctx, u)
	require.Error(t, err)

	start = time.Now()
	c.Start(t)
	t.Logf("start took %s", time.Since(start))

	conn, err = pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var reason string
	require.NoError(t, conn.QueryRow(ctx, `select reason from outbox_relay_control`).Scan(&reason))
	require.Equal(t, "kept", reason)
}

func TestPostgresClusterFsyncOption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		fsync bool
		want  string
	}{{"default", false, "off"}, {"fsync", true, "on"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testenv.NewPostgresCluster(t, testenv.PostgresOptions{Fsync: tc.fsync})
			conn, err := pgx.Connect(ctx, c.URL("postgres"))
			require.NoError(t, err)
			defer conn.Close(ctx)
			for _, setting := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
				var v string
				require.NoError(t, conn.QueryRow(ctx, "select current_setting($1)", setting).Scan(&v))
				require.Equal(t, tc.want, v, setting)
			}
			var maxConns string
			require.NoError(t, conn.QueryRow(ctx, "show max_connections").Scan(&maxConns))
			require.Equal(t, "300", maxConns)
		})
	}
}
