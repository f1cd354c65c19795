package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestConfigErrorsExitTwoNamingTheVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		args    []string
		environ []string
		wantVar string
	}{
		{"empty database url", nil, []string{"DATABASE_URL=", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "DATABASE_URL"},
		{"missing bootstrap", nil, []string{"DATABASE_URL=postgres://x"}, "KAFKA_BOOTSTRAP_SERVERS"},
		{"bad batch size", nil, []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=b:1", "INGEST_BATCH_SIZE=many"}, "INGEST_BATCH_SIZE"},
		{"migrate without database", []string{"migrate"}, nil, "DATABASE_URL"},
		{"malformed database url", nil, []string{"DATABASE_URL=postgres://u:pw@[::1", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "DATABASE_URL"},
		{"migrate, malformed database url", []string{"migrate"}, []string{"DATABASE_URL=host=x port=notaport"}, "DATABASE_URL"},
		// librdkafka names the property by its own name (linger.ms is
		// queue.buffering.max.ms to it); the line names the variable.
		{"property librdkafka refuses", nil, []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "KAFKA_PROPERTY_LINGER_MS=-5"}, "set by KAFKA_PROPERTY_LINGER_MS"},
		{"property librdkafka refuses, by its alias", nil, []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "KAFKA_PROPERTY_QUEUE_BUFFERING_MAX_MS=-5"}, "set by KAFKA_PROPERTY_QUEUE_BUFFERING_MAX_MS"},
		{"consumer property librdkafka refuses", nil, []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "KAFKA_CONSUMER_PROPERTY_FETCH_MAX_BYTES=-1"}, "set by KAFKA_CONSUMER_PROPERTY_FETCH_MAX_BYTES"},
		{"unknown property", nil, []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "KAFKA_PROPERTY_NO_SUCH_THING=1"}, "set by KAFKA_PROPERTY_NO_SUCH_THING"},
		{"dlq-replay to an output topic", []string{"dlq-replay", "--to", "pcp.route.in.v1"}, []string{"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "is an output topic"},
		{"dlq-replay to a renamed output topic", []string{"dlq-replay", "--to", "geo.events"}, []string{"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "TOPIC_ROUTE_GEOREFERENCE=geo.events"}, "is an output topic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			// The HTTP listener is bound before the Kafka clients are
			// made: any free port, or the cases would share :8080.
			environ := append([]string{"HTTP_ADDR=127.0.0.1:0"}, tc.environ...)
			err := run(context.Background(), tc.args, environ, io.Discard, &stderr)
			require.Error(t, err)
			require.Equal(t, 2, config.ExitCode(err))
			require.Contains(t, err.Error(), tc.wantVar)
			require.Equal(t, 1, strings.Count(err.Error(), "\n")+1, "one line")
			require.Empty(t, stderr.String(), "nothing logged before the one line")
		})
	}
	err := run(context.Background(), []string{"frobnicate"}, nil, io.Discard, io.Discard)
	require.Equal(t, 2, config.ExitCode(err))

	// migrate refuses arguments before it connects: the URL points at
	// nothing, so only a usage error (2) or help (0) can come back.
	env := []string{"DATABASE_URL=postgres://u@127.0.0.1:1/db?connect_timeout=1"}
	for _, arg := range []string{"--bogus", "extra"} {
		err := run(context.Background(), []string{"migrate", arg}, env, io.Discard, io.Discard)
		require.Error(t, err, arg)
		require.Equal(t, 2, config.ExitCode(err), "%s: %v", arg, err)
		require.Contains(t, err.Error(), arg)
	}
	var help bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"migrate", "--help"}, env, &help, io.Discard))
	require.Contains(t, help.String(), "usage: ingestor migrate")
}

func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	url := testenv.EmptyDatabaseURL(t)
	env := []string{"DATABASE_URL=" + url}
	ctx := context.Background()
	require.NoError(t, run(ctx, []string{"migrate"}, env, io.Discard, io.Discard))

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tables int
	require.NoError(t, conn.QueryRow(ctx, `select count(*) from information_schema.tables
		where table_name in ('route_passports', 'route_passport_outbox')`).Scan(&tables))
	require.Equal(t, 2, tables)
	var version int
	require.NoError(t, conn.QueryRow(ctx, `select version from schema_version`).Scan(&version))

	require.NoError(t, run(ctx, []string{"migrate"}, env, io.Discard, io.Discard), "second run")
	var again int
	require.NoError(t, conn.QueryRow(ctx, `select version from schema_version`).Scan(&again))
	require.Equal(t, version, again)
}

// With only the two required variables set, and neither PostgreSQL nor Kafka
// reachable, the process serves /healthz and /metrics (and /readyz says not
// ready), and never logs the database password.
func TestServesHealthAndMetricsWithOnlyRequiredVariables(t *testing.T) {
	t.Parallel()
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)

	env := []string{
		"DATABASE_URL=postgres://pcp:s3cret-pw@127.0.0.1:1/db?connect_timeout=1",
		"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1",
		"HTTP_ADDR=" + addr,
	}
	var stderr testenv.SyncBuffer
	ingestor := testenv.StartMain(t, "ingestor", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, &stderr) })

	get := func(path string) (int, string) { return httpGet(addr, path) }
	require.Eventually(t, func() bool { c, _ := get("/healthz"); return c == 200 }, 10*time.Second, 50*time.Millisecond)
	code, body := get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "go_goroutines")
	require.Contains(t, body, "route_passport_ingest_success_total")
	// Every series of ours is in the README's Metrics table.
	testenv.RequireMetricsDocumented(t, body)
	code, _ = get("/readyz")
	require.Equal(t, 503, code)
	// Nothing fails while nothing is consumed: the log still says why.
	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), "postgres not reachable yet")
	}, 10*time.Second, 50*time.Millisecond, "log: %s", &stderr)

	require.NoError(t, ingestor.Stop())
	require.NotContains(t, stderr.String(), "s3cret-pw")
}

// httpGet fetches path from the process's HTTP server at addr: the status
// and body, or 0 and the error when nothing answers.
func httpGet(addr, path string) (int, string) {
	return testenv.HTTPGet(context.Background(), "http://"+addr+path)
}

// An HTTP_ADDR in use stops the process before it connects anywhere, with
// its one line and nothing logged: the listener is bound first.
func TestHTTPAddrInUseStopsBeforeAnything(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	kafka, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer kafka.Close()
	dialed := make(chan struct{}, 1)
	go func() {
		if c, err := kafka.Accept(); err == nil {
			dialed <- struct{}{}
			c.Close()
		}
	}()
	var stderr bytes.Buffer
	err = run(context.Background(), nil, []string{"DATABASE_URL=postgres://x", "KAFKA_BOOTSTRAP_SERVERS=" + kafka.Addr().String(), "HTTP_ADDR=" + taken.Addr().String()}, io.Discard, &stderr)
	require.ErrorContains(t, err, "listen on HTTP_ADDR")
	require.Empty(t, stderr.String(), "nothing logged before the one line")
	select {
	case <-dialed:
		t.Fatal("the Kafka client connected before the listener failed")
	case <-time.After(500 * time.Millisecond):
	}
}
