package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// freeAddr is an HTTP_ADDR for a relay of the test.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	return addr
}

// get fetches url: its status and body, or 0 when nothing answers.
func get(url string) (int, string) { return testenv.HTTPGet(context.Background(), url) }

func TestOps(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	ctx := context.Background()
	pool, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rows := relaytest.MustInsert(t, pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	_, err = pool.Exec(ctx, `update route_passport_outbox set status = 'FAILED', attempts = 10, last_error = 'Broker: Message size too large' where id = $1`, rows[0].ID)
	require.NoError(t, err)
	env := []string{"DATABASE_URL=" + url} // no Kafka settings needed

	runOK := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, args, env, &out, &errOut)
		require.NoError(t, err, "stderr: %s", errOut.String())
		return out.String()
	}

	t.Run("Stats", func(t *testing.T) {
		out := runOK("stats")
		require.Regexp(t, `PENDING\s+2`, out)
		require.Regexp(t, `FAILED\s+1`, out)
		require.Contains(t, out, "Broker: Message size too large")
		var s store.Stats
		require.NoError(t, json.Unmarshal([]byte(runOK("stats", "--json")), &s))
		require.EqualValues(t, 2, s.Counts[outbox.StatusPending])
		require.Equal(t, []store.FailureGroup{{LastError: "Broker: Message size too large", Count: 1}}, s.Failures)
	})

	t.Run("PauseResume", func(t *testing.T) {
		require.Contains(t, runOK("pause", "--reason", "kafka upgrade"), "paused")
		require.Contains(t, runOK("stats"), "(kafka upgrade)\n")
		runOK("pause") // a second pause without a reason keeps the first's
		require.Contains(t, runOK("stats"), "(kafka upgrade)\n")
		runOK("pause", "--reason", "broker 3 disk")
		require.Regexp(t, `relays: PAUSED since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ by outbox-relay cli \(.+\) \(broker 3 disk\)\n`, runOK("stats"))
		var s store.Stats
		require.NoError(t, json.Unmarshal([]byte(runOK("stats", "--json")), &s))
		require.True(t, s.Paused)
		require.Contains(t, s.PausedBy, "outbox-relay cli")
		require.NotNil(t, s.PausedAt)
		require.WithinDuration(t, time.Now(), *s.PausedAt, time.Minute)
		c, err := store.NewOutbox(pool).Control(ctx)
		require.NoError(t, err)
		require.True(t, c.Paused)
		require.Contains(t, c.UpdatedBy, "outbox-relay cli")
		require.Contains(t, runOK("resume"), "resumed")
		require.Contains(t, runOK("stats"), "relays: running")
		s = store.Stats{}
		require.NoError(t, json.Unmarshal([]byte(runOK("stats", "--json")), &s))
		require.False(t, s.Paused)
		require.Empty(t, s.PausedBy)
		require.Nil(t, s.PausedAt)
	})

	t.Run("Requeue", func(t *testing.T) {
		require.Equal(t, "requeued 1 row(s)\n", runOK("requeue", "--failed"))
		require.Equal(t, "requeued 0 row(s)\n", runOK("requeue", "--failed"))
		require.Equal(t, "requeued 1 row(s)\n", runOK("requeue", "--id", rows[1].ID.String()))
		require.Equal(t, "requeued 1 row(s)\n", runOK("requeue", "--route-id", rows[2].RouteID))
		st := relaytest.Get(t, pool, rows[0].ID)
		require.Equal(t, outbox.StatusPending, st.Status)
		require.Zero(t, st.Attempts)

		// No such row: exit 1 with a message naming it.
		missing := "0f8fad5b-d9cb-469f-a165-70867728950e"
		for _, args := range [][]string{{"requeue", "--id", missing}, {"requeue", "--route-id", missing}} {
			var out bytes.Buffer
			err := run(ctx, args, env, &out, io.Discard)
			require.Error(t, err, "%v", args)
			require.Equal(t, 1, config.ExitCode(err), "%v: %v", args, err)
			require.Contains(t, err.Error(), missing)
			require.Contains(t, err.Error(), "no outbox row matches")
		}

		// A row a relay is publishing now is left alone, and said so.
		_, err := pool.Exec(ctx, `update route_passport_outbox set locked_until = now() + interval '1 minute', lock_token = gen_random_uuid() where id = $1`, rows[1].ID)
		require.NoError(t, err)
		out := runOK("requeue", "--id", rows[1].ID.String())
		require.Contains(t, out, "requeued 0 row(s)\n")
		require.Contains(t, out, "skipped 1 row(s) in flight")
		require.NotNil(t, relaytest.Get(t, pool, rows[1].ID).LockedUntil, "lease kept")
	})

	// A resume behind a psql left in its transaction says whose lock it
	// waits for, then finishes once that transaction ends.
	t.Run("WaitBehindALockIsNotSilent", func(t *testing.T) {
		runOK("pause", "--reason", "lock test")
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var holder int
		require.NoError(t, tx.QueryRow(ctx, `select pg_backend_pid()`).Scan(&holder))
		_, err = tx.Exec(ctx, `select 1 from outbox_relay_control for update`)
		require.NoError(t, err)

		var out bytes.Buffer
		errOut := &testenv.SyncBuffer{}
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"resume"}, env, &out, errOut) }()
		require.Eventually(t, func() bool {
			return strings.Contains(errOut.String(), fmt.Sprintf("waiting for a lock held by PostgreSQL session %d (application \"test\", idle in transaction", holder))
		}, 15*time.Second, 50*time.Millisecond, "stderr: %s", errOut)
		require.NoError(t, tx.Rollback(ctx))
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("resume still waiting after the lock was released")
		}
		require.Equal(t, "resumed\n", out.String())
		require.Equal(t, 1, strings.Count(errOut.String(), "waiting for a lock"), "told once per session: %s", errOut)
	})

	t.Run("StatsEstimate", func(t *testing.T) {
		_, err := pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() where id = $1`, rows[2].ID)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `analyze route_passport_outbox`)
		require.NoError(t, err)
		require.Regexp(t, `PUBLISHED\s+~\d+\s+\(estimate`, runOK("stats"))
		require.Regexp(t, `PUBLISHED\s+1\n`, runOK("stats", "--exact"))
		var s store.Stats
		require.NoError(t, json.Unmarshal([]byte(runOK("stats", "--json", "--exact")), &s))
		require.True(t, s.PublishedExact)
		require.EqualValues(t, 1, s.Counts[outbox.StatusPublished])
	})

	t.Run("UsageErrors", func(t *testing.T) {
		for _, args := range [][]string{
			{"requeue"},
			{"requeue", "--failed", "--id", rows[0].ID.String()},
			{"requeue", "--id", "not-a-uuid"},
			{"requeue", "--route-id", "0f8fad5bd9cb469fa16570867728950e"},
			{"stats", "--bogus"},
			{"pause", "--json"},
			{"resume", "now"},
			{"pause", "--reason", "\xff\xfe"},
			{"frobnicate"},
		} {
			err := run(ctx, args, env, io.Discard, io.Discard)
			require.Error(t, err, "%v", args)
			require.Equal(t, 2, config.ExitCode(err), "%v: %v", args, err)
		}
		err := run(ctx, []string{"stats"}, nil, io.Discard, io.Discard)
		require.Equal(t, 2, config.ExitCode(err), "DATABASE_URL missing: %v", err)
		err = run(ctx, []string{"stats"}, append(env, "GOGC=fast"), io.Discard, io.Discard)
		require.Equal(t, 2, config.ExitCode(err), "GOGC invalid: %v", err)
		require.ErrorContains(t, err, "GOGC")
		for _, h := range []string{"help", "-h", "-help", "--help"} {
			var out bytes.Buffer
			require.NoError(t, run(ctx, []string{h}, nil, &out, io.Discard), h)
			require.Contains(t, out.String(), "usage: outbox-relay", h)
		}
	})

	// A server that takes the connection and never answers (a pooler in
	// front of a PostgreSQL that is down): the error says so, not only
	// "context deadline exceeded".
	t.Run("NoAnswer", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close() // held open, never answered
			}
		}()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err = run(cctx, []string{"stats"}, []string{"DATABASE_URL=postgres://u:pw@" + ln.Addr().String() + "/db"}, io.Discard, io.Discard)
		require.Error(t, err)
		require.Equal(t, 1, config.ExitCode(err))
		require.ErrorContains(t, err, "or PostgreSQL, or the pooler in front of it, not answering")
		require.ErrorContains(t, err, "within the command's")

		// The connection's own bound runs out first: the error names that
		// bound, not the command's, which had not run out.
		start := time.Now()
		err = run(ctx, []string{"stats"}, []string{"DATABASE_URL=postgres://u:pw@" + ln.Addr().String() + "/db?connect_timeout=1"}, io.Discard, io.Discard)
		require.Error(t, err)
		require.Less(t, time.Since(start), opsTimeout/2)
		require.Equal(t, 1, config.ExitCode(err))
		require.ErrorContains(t, err, "within its connect_timeout")
		require.NotContains(t, err.Error(), "within the command's")
	})

	// On a database nobody migrated a command says what to do, not only
	// that a relation does not exist.
	t.Run("UnmigratedDatabase", func(t *testing.T) {
		env := []string{"DATABASE_URL=" + testenv.EmptyDatabaseURL(t)}
		for _, args := range [][]string{{"stats"}, {"requeue", "--failed"}, {"pause", "--reason", "x"}} {
			err := run(ctx, args, env, io.Discard, io.Discard)
			require.Error(t, err, "%v", args)
			require.Equal(t, 1, config.ExitCode(err), "%v: %v", args, err)
			require.ErrorContains(t, err, "run `ingestor migrate`", "%v", args)
		}
	})

	// A connection string that does not parse stops the process at start,
	// naming its variable and not echoing the password.
	t.Run("MalformedURLs", func(t *testing.T) {
		bad := "postgres://u:S3CRET@[::1"
		for _, tc := range []struct {
			args    []string
			environ []string
			wantVar string
		}{
			{nil, []string{"DATABASE_URL=" + bad, "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "DATABASE_URL"},
			{nil, []string{"DATABASE_URL=postgres://u@127.0.0.1:1/db", "DATABASE_LISTEN_URL=" + bad, "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"}, "DATABASE_LISTEN_URL"},
			{[]string{"stats"}, []string{"DATABASE_URL=" + bad}, "DATABASE_URL"},
		} {
			err := run(ctx, tc.args, tc.environ, io.Discard, io.Discard)
			require.Error(t, err, tc.wantVar)
			require.Equal(t, 2, config.ExitCode(err), "%s: %v", tc.wantVar, err)
			require.Contains(t, err.Error(), tc.wantVar)
			require.NotContains(t, err.Error(), "S3CRET")
		}
	})
}

// TestRunRelayHTTPFirst: /healthz and /metrics answer while neither Kafka
// nor PostgreSQL does; /readyz says why it is not ready; SIGTERM exits fast.
func TestRunRelayHTTPFirst(t *testing.T) {
	t.Parallel()
	dead := freeAddr(t)
	addr := freeAddr(t)
	env := []string{
		"DATABASE_URL=postgres://u:secret@" + dead + "/db?connect_timeout=1",
		"KAFKA_BOOTSTRAP_SERVERS=" + dead,
		"HTTP_ADDR=" + addr,
		"LOG_LEVEL=error",
	}
	logs := &testenv.SyncBuffer{}
	relay := testenv.StartMain(t, "relay", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, logs) })

	require.Eventually(t, func() bool { code, _ := get("http://" + addr + "/healthz"); return code == 200 }, 10*time.Second, 20*time.Millisecond)
	code, body := get("http://" + addr + "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "kafka")
	require.Contains(t, body, "postgres")
	// The relay's series appear once it is built, just after HTTP starts.
	require.Eventually(t, func() bool {
		code, body := get("http://" + addr + "/metrics")
		return code == 200 && strings.Contains(body, "route_passport_outbox_published_total") &&
			strings.Contains(body, "route_passport_outbox_paused")
	}, 10*time.Second, 20*time.Millisecond)
	// Every series of ours is in the README's Metrics table.
	_, body = get("http://" + addr + "/metrics")
	testenv.RequireMetricsDocumented(t, body)

	stopAt := time.Now()
	require.NoError(t, relay.Stop())
	t.Logf("stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	require.NotContains(t, logs.String(), "secret", "no password in the logs")
}

// TestRunRelayPublishes runs the whole binary against the test database and
// broker.
func TestRunRelayPublishes(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "cmd-relay", 3)
	ctx := context.Background()
	pool, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	addr := freeAddr(t)
	env := []string{"DATABASE_URL=" + url, "KAFKA_BOOTSTRAP_SERVERS=" + bootstrap, "HTTP_ADDR=" + addr,
		"KAFKA_PRODUCER_PROPERTY_SOCKET_KEEPALIVE_ENABLE=true", "KAFKA_PROPERTY_CLIENT_RACK=rack-secret-value"}
	logs := &testenv.SyncBuffer{}
	relay := testenv.StartMain(t, "relay", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, logs) })

	// The start line names every property the producer gets, a
	// producer-only one too, and no value.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"starting"`) }, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, logs.String(), `"kafka_properties":["client.rack","socket.keepalive.enable"]`)
	require.Contains(t, logs.String(), `"retention":"24h0m0s"`)
	require.NotContains(t, logs.String(), "rack-secret-value")

	relaytest.MustInsert(t, pool, outbox.Event{Topic: topic}, outbox.Event{Topic: topic})
	require.Len(t, testenv.Consume(t, bootstrap, topic, 2, 30*time.Second), 2)
	require.Eventually(t, func() bool { return relaytest.Count(t, pool, outbox.StatusPublished) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 }, 10*time.Second, 20*time.Millisecond)
	// Counted after the commit that marked the rows.
	require.Eventually(t, func() bool {
		_, body := get("http://" + addr + "/metrics")
		return strings.Contains(body, "route_passport_outbox_published_total 2")
	}, 10*time.Second, 20*time.Millisecond)

	stopAt := time.Now()
	require.NoError(t, relay.Stop())
	t.Logf("stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	require.False(t, strings.Contains(logs.String(), `"level":"ERROR"`), logs.String())
}

// startPublishing runs the relay on a database of its own and bootstrap
// until cancel (its SIGTERM), and returns once it has published a first row
// to topic, with the database's pool, run's result (done) and its log.
func startPublishing(t *testing.T, bootstrap, topic string) (*pgxpool.Pool, context.CancelFunc, <-chan error, *testenv.SyncBuffer) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := store.Open(context.Background(), url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	env := []string{"DATABASE_URL=" + url, "KAFKA_BOOTSTRAP_SERVERS=" + bootstrap, "HTTP_ADDR=" + freeAddr(t), "LOG_LEVEL=warn"}
	runCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logs := &testenv.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(runCtx, nil, env, io.Discard, logs) }()

	relaytest.MustInsert(t, pool, outbox.Event{Topic: topic})
	require.Eventually(t, func() bool { return relaytest.Count(t, pool, outbox.StatusPublished) == 1 }, 30*time.Second, 20*time.Millisecond)
	return pool, cancel, done, logs
}

// TestRunRelayShutdownFrozenBroker: SIGTERM while a batch waits on a frozen
// broker (SIGSTOP: connections open, nothing answers). The process stops
// within the 30s of contract §5 and gives the leases back, no attempt
// counted.
func TestRunRelayShutdownFrozenBroker(t *testing.T) {
	t.Parallel()
	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	topic := testenv.CreateTopic(t, broker.Addr(), "cmd-frozen", 1)
	pool, cancel, done, logs := startPublishing(t, broker.Addr(), topic)

	broker.Pause(t)
	defer broker.Resume(t)
	rows := relaytest.MustInsert(t, pool, outbox.Event{Topic: topic}, outbox.Event{Topic: topic})
	require.Eventually(t, func() bool { return relaytest.Get(t, pool, rows[0].ID).LockedUntil != nil }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // the batch is waiting for its reports

	stopAt := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not stop within 30s of SIGTERM with a frozen broker\n%s", logs.String())
	}
	t.Logf("stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	for _, r := range rows {
		st := relaytest.Get(t, pool, r.ID)
		require.Equal(t, outbox.StatusPending, st.Status)
		require.Nil(t, st.LockedUntil, "lease given back")
		require.Zero(t, st.Attempts)
	}
}

// TestPrintStatsEscapesControlCharacters: a pause reason or a last_error is
// text from the tables; an escape sequence in it must reach the terminal as
// visible characters, not as a command.
func TestPrintStatsEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, printStats(&out, store.Stats{
		Counts:         map[string]int64{outbox.StatusFailed: 1},
		PublishedExact: true,
		Paused:         true,
		PauseReason:    "kafka \x1b[2Jupgrade",
		Failures:       []store.FailureGroup{{LastError: "line one\nline\ttwo\a", Count: 1}},
	}))
	require.NotRegexp(t, "[\x00-\x08\x0b-\x1f\x7f]", out.String())
	require.Contains(t, out.String(), `relays: PAUSED (kafka \x1b[2Jupgrade)`)
	require.Contains(t, out.String(), `line one\nline\ttwo\a`)
	require.Contains(t, out.String(), "ROWS  LAST ERROR", "plain text stays as it is")
}

// TestRunRelayStopSendsNothingItGaveBack: a batch that could not be sent
// while the brokers were unreachable is given back when the stop's grace
// runs out; its records, still queued in the producer, must not go out
// when the brokers come back during the exit: their rows are PENDING and
// the next claim publishes them, so they would be published twice.
func TestRunRelayStopSendsNothingItGaveBack(t *testing.T) {
	t.Parallel()
	kafka := testenv.NewProxiedKafka(t, 1)
	topic := testenv.CreateTopic(t, kafka.Addr(), "cmd-giveback", 1)
	pool, cancel, done, logs := startPublishing(t, kafka.Addr(), topic)

	kafka.Proxy.Down(t)
	rows := relaytest.MustInsert(t, pool, outbox.Event{Topic: topic}, outbox.Event{Topic: topic})
	require.Eventually(t, func() bool { return relaytest.Get(t, pool, rows[0].ID).LockedUntil != nil }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.Eventually(t, func() bool { return relaytest.Get(t, pool, rows[0].ID).LockedUntil == nil }, 25*time.Second, 5*time.Millisecond,
		"the batch given back at the end of the grace")
	kafka.Proxy.Up(t) // the brokers are back while the relay exits
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not stop\n%s", logs.String())
	}
	time.Sleep(2 * time.Second) // a client closed without purging would have delivered by now (reconnects within 1 s)
	require.Equal(t, 1, len(testenv.ReadAll(t, kafka.Addr(), topic)), "records on the topic: only the row marked PUBLISHED was sent")
	for _, r := range rows {
		require.Equal(t, outbox.StatusPending, relaytest.Get(t, pool, r.ID).Status)
	}
}
