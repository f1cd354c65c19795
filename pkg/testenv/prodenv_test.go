package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/testenv"
)

// TestPgBouncerTransactionPooling: two clients of a one-connection pool are
// served by the same PostgreSQL backend, and session state does not follow a
// client from one transaction to the next: transaction pooling, for real.
func TestPgBouncerTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	c.CreateDatabase(t, "app", false)
	b := testenv.NewPgBouncer(t, c, testenv.PgBouncerOptions{PoolSize: 1})
	require.Contains(t, b.URL("app"), "default_query_exec_mode=exec")

	a, err := pgx.Connect(ctx, b.URL("app"))
	require.NoError(t, err)
	defer a.Close(ctx)
	o, err := pgx.Connect(ctx, b.URL("app"))
	require.NoError(t, err)
	defer o.Close(ctx)
	var pidA, pidO int
	require.NoError(t, a.QueryRow(ctx, "select pg_backend_pid()").Scan(&pidA))
	require.NoError(t, o.QueryRow(ctx, "select pg_backend_pid()").Scan(&pidO))
	require.Equal(t, pidA, pidO, "one server connection serves both clients")

	_, err = a.Exec(ctx, "set application_name = 'leaked'")
	require.NoError(t, err)
	var name string
	require.NoError(t, o.QueryRow(ctx, "show application_name").Scan(&name))
	require.Equal(t, "leaked", name, "without a reset query, session state leaks to the next client: what the service must not rely on either way")
}

// TestReplicatedClusterFailover: a row committed through the multi-host URL
// survives killing the primary; after the promotion the same URL writes to
// the new primary, and skips the old one when it comes back read-only.
func TestReplicatedClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := testenv.NewReplicatedCluster(t, testenv.PostgresOptions{})
	u := r.CreateDatabase(t, "app", false)
	require.Contains(t, u, "target_session_attrs=read-write")

	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "create table t (v int); insert into t values (1)")
	require.NoError(t, err)
	conn.Close(ctx)

	r.KillPrimary(t)
	_, err = pgx.Connect(ctx, r.Primary.URL("app"))
	require.Error(t, err, "the killed primary still answers")
	_, err = pgx.Connect(ctx, u)
	require.Error(t, err, "an unpromoted standby accepted a read-write session")

	promoted := time.Now()
	r.Promote(t)
	conn, err = pgx.Connect(ctx, u)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "insert into t values (2)")
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select count(*) from t").Scan(&n))
	require.Equal(t, 2, n)
	conn.Close(ctx)
	t.Logf("writing on the promoted standby %s after the promotion", time.Since(promoted).Round(time.Millisecond))

	r.RestartPrimaryReadOnly(t)
	old, err := pgx.Connect(ctx, r.Primary.URL("app"))
	require.NoError(t, err)
	_, err = old.Exec(ctx, "insert into t values (3)")
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "25006", "old primary: want SQLSTATE 25006, got %v", err)
	old.Close(ctx)
	conn, err = pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "insert into t values (4)")
	require.NoError(t, err, "the multi-host URL must skip the read-only old primary")
}

// TestFaultProxyPostgres: latency adds its delay, a blackhole hangs a query
// until the client's own deadline, a reset ends the connection, and a healed
// proxy serves new connections.
func TestFaultProxyPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.NewPostgresCluster(t, testenv.PostgresOptions{})
	p := testenv.NewFaultProxy(t, "postgres", c.Addr())
	u := c.URLAt(p.Addr(), "postgres")

	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	p.Latency(t, 100*time.Millisecond, 50*time.Millisecond)
	start := time.Now()
	_, err = conn.Exec(ctx, "select 1")
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	p.Heal(t, "latency")

	p.Blackhole(t)
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	start = time.Now()
	_, err = conn.Exec(qctx, "select 1")
	cancel()
	require.Error(t, err, "a query through a blackhole returned")
	require.Less(t, time.Since(start), 5*time.Second)
	conn.Close(ctx)
	p.Heal(t, "blackhole")

	conn, err = pgx.Connect(ctx, u)
	require.NoError(t, err)
	p.ResetPeer(t)
	_, err = conn.Exec(ctx, "select 1")
	require.Error(t, err, "a query through reset_peer returned")
	conn.Close(ctx)
	p.Clear(t)

	conn, err = pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "select 1")
	require.NoError(t, err)
}

// TestProxiedKafka: the broker is reached through the proxy (metadata
// included), and a blackhole on the proxy stops requests.
func TestProxiedKafka(t *testing.T) {
	t.Parallel()
	k := testenv.NewProxiedKafka(t, 3)
	topic := testenv.CreateTopic(t, k.Addr(), "proxied", 3)
	testenv.Produce(t, k.Addr(), topic, testenv.Record{Value: []byte("a")})
	require.Len(t, testenv.Consume(t, k.Addr(), topic, 1, 30*time.Second), 1)

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	require.NoError(t, cl.Ping(ctx))
	k.Proxy.Blackhole(t)
	// A request, not a produce: an idempotent producer cannot give up on a
	// batch in flight, whatever its context says.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = kadm.NewClient(cl).ListTopics(pctx)
	cancel()
	require.Error(t, err, "a metadata request through a blackhole was answered")
	k.Proxy.Heal(t, "blackhole")
	testenv.Produce(t, k.Addr(), topic, testenv.Record{Value: []byte("d")})
}

// TestQueryExecModeURL: with TESTENV_QUERY_EXEC_MODE set, test databases
// come with that mode, and a query with a text array parameter runs in it.
func TestQueryExecModeURL(t *testing.T) {
	t.Setenv(testenv.EnvQueryExecMode, "simple_protocol")
	u := testenv.DatabaseURL(t)
	require.Contains(t, u, "default_query_exec_mode=simple_protocol")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select cardinality($1::text[])", []string{"a", "b"}).Scan(&n))
	require.Equal(t, 2, n)
}
