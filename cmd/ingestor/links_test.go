package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

// A frozen broker (SIGSTOP: connections open, nothing answers) turns the
// ingestor's /readyz non-200 within a few seconds, and ready again within
// about a second of the thaw (the Kafka probe runs every second). The
// stage histogram is exported.
func TestFrozenBrokerIsReflectedInReadiness(t *testing.T) {
	t.Parallel()
	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1})
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	env := []string{
		"DATABASE_URL=" + testenv.DatabaseURL(t),
		"KAFKA_BOOTSTRAP_SERVERS=" + broker.Addr(),
		// Not ready while the brokers answer without it.
		"TOPIC_INPUT=" + testenv.CreateTopic(t, broker.Addr(), "links-in", 1),
		"HTTP_ADDR=" + addr,
		"LOG_LEVEL=warn",
	}
	var stderr testenv.SyncBuffer
	ingestor := testenv.StartMain(t, "ingestor", func(ctx context.Context) error { return run(ctx, nil, env, io.Discard, &stderr) })
	get := func(path string) (int, string) { return httpGet(addr, path) }
	require.Eventually(t, func() bool { c, _ := get("/readyz"); return c == 200 }, 60*time.Second, 50*time.Millisecond,
		"ready with PostgreSQL and the broker up")
	_, metrics := get("/metrics")
	require.Contains(t, metrics, "route_passport_stage_seconds", "the stage histogram is exported")

	broker.Pause(t)
	frozen := time.Now()
	require.Eventually(t, func() bool { c, _ := get("/readyz"); return c != 200 }, 20*time.Second, 20*time.Millisecond,
		"not ready while the broker is frozen")
	notReady := time.Since(frozen)
	time.Sleep(3 * time.Second)
	broker.Resume(t)
	thawed := time.Now()
	require.Eventually(t, func() bool { c, _ := get("/readyz"); return c == 200 }, 30*time.Second, 20*time.Millisecond)
	ready := time.Since(thawed)
	t.Logf("figures: broker frozen: ingestor not ready %.2fs after the freeze, ready %.2fs after the thaw", notReady.Seconds(), ready.Seconds())
	require.Less(t, notReady, 5*time.Second)
	require.LessOrEqual(t, ready, 2*time.Second)

	require.NoError(t, ingestor.Stop())
	require.False(t, strings.Contains(stderr.String(), "panic"))
}
