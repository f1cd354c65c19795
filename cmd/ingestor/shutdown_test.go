package main

import (
	"context"
	"io"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/shutdown"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestShutdownWithinTheLimitWhenEverythingHangs: SIGTERM while a batch is
// stuck on a PostgreSQL link that hangs (no RST) and the broker is frozen
// (SIGSTOP), so that every step of the stop runs into its bound: the wait
// for the batch, the offset commit, leaving the group, the producer's
// flush, the pool's close. Each has a bound of its own, and their sum was
// over the contract's 30 s; the process must still exit within it.
func TestShutdownWithinTheLimitWhenEverythingHangs(t *testing.T) {
	t.Parallel()
	direct := testenv.DatabaseURL(t)
	u, err := url.Parse(direct)
	require.NoError(t, err)
	proxy := testenv.NewFaultProxy(t, "ingestor-shutdown-pg", u.Host)
	u.Host = proxy.Addr()

	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	httpAddr, err := testenv.FreeAddr()
	require.NoError(t, err)
	input := testenv.CreateTopic(t, broker.Addr(), "shutdown-input", 1)
	env := []string{
		"DATABASE_URL=" + u.String(),
		"KAFKA_BOOTSTRAP_SERVERS=" + broker.Addr(),
		"TOPIC_INPUT=" + input,
		"TOPIC_INPUT_DLQ=" + testenv.CreateTopic(t, broker.Addr(), "shutdown-dlq", 1),
		"KAFKA_CONSUMER_GROUP=shutdown-test",
		"HTTP_ADDR=" + httpAddr,
		"LOG_LEVEL=warn",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testenv.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, env, io.Discard, logs) }()

	pool, err := store.Open(context.Background(), direct, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rows := func() int {
		var n int
		_ = pool.QueryRow(context.Background(), `select count(*) from route_passports`).Scan(&n)
		return n
	}
	rng := passportgen.NewRand(30)
	p := passportgen.Valid(rng)
	testenv.Produce(t, broker.Addr(), input, testenv.Record{Key: p.Key, Value: p.Value})
	require.Eventually(t, func() bool { return rows() == 1 }, 60*time.Second, 50*time.Millisecond, "the first passport written\n%s", logs)

	// The next batch hangs on the link; then the broker freezes.
	proxy.Blackhole(t)
	defer proxy.Clear(t)
	p = passportgen.Valid(rng)
	testenv.Produce(t, broker.Addr(), input, testenv.Record{Key: p.Key, Value: p.Value})
	time.Sleep(2 * time.Second) // polled, and its write sent into the hole
	broker.Pause(t)
	defer broker.Resume(t)

	stopAt := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(shutdown.Limit + 10*time.Second):
		t.Fatalf("the ingestor did not stop within %s of SIGTERM\n%s", shutdown.Limit+10*time.Second, logs)
	}
	took := time.Since(stopAt)
	t.Logf("stopped in %s", took.Round(time.Millisecond))
	require.Less(t, took, shutdown.Limit, "contract §5: stop within 30 s of SIGTERM\n%s", logs)
	require.Equal(t, 1, rows(), "the stuck batch wrote nothing")
}
