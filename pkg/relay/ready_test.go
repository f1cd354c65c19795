package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/testenv"
)

// pausedOutbox reads the pause flag as set and answers, like a database
// that serves reads.
type pausedOutbox struct{ fakeOutbox }

func (p *pausedOutbox) Control(context.Context) (outbox.Control, error) {
	return outbox.Control{Paused: true}, nil
}

// While Kafka is down the pause-flag read reports the database, but never
// over a failure another call reported: a paused relay whose release keeps
// failing (a read-only database answers reads) stays not ready instead of
// alternating with each read. And a failed read clears claimsHealthy, so that the
// first successful claim once both are back reports ready again (it stayed
// not ready for good after a partition healed both at once).
func TestPauseFlagReadReportsTheDatabaseWithoutOverriding(t *testing.T) {
	t.Parallel()
	ready := obs.NewReadiness(prometheus.NewRegistry(), "x")
	r, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), &pausedOutbox{}, &fakePublisher{},
		Config{Readiness: ready, PollInterval: 100 * time.Millisecond, ProbeMaxBackoff: 50 * time.Millisecond})
	require.NoError(t, err)
	r.paused.Store(true)
	r.kafkaDown.Store(true)
	r.setKafkaReady(errors.New("no broker answers"))
	r.setReady("postgres", "not connected yet")
	r.dbByControl.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	go r.watchControl(ctx)
	go r.retryDB(ctx, time.Now().Add(time.Minute), "release rows", func(context.Context) error {
		return errors.New("cannot execute UPDATE in a read-only transaction (SQLSTATE 25006)")
	})
	time.Sleep(200 * time.Millisecond) // the release has failed once
	for ctx.Err() == nil {
		require.Error(t, ready.Check(), "ready while every release fails")
		time.Sleep(5 * time.Millisecond)
	}

	r.claimsHealthy.Store(true)
	r.showDBWhileNoClaims(context.Background(), errors.New("connection refused"))
	require.False(t, r.claimsHealthy.Load(), "a failed read leaves the next successful claim to report ready")
}

// What the producer lacks shows in /readyz with its latest text, after a
// probe's error and not while paused, and is logged when it begins and
// ends, not at each change of the connection state its text names.
func TestKafkaLackShownAndLoggedOnce(t *testing.T) {
	t.Parallel()
	ready := obs.NewReadiness(prometheus.NewRegistry(), "x")
	var logs testenv.SyncBuffer
	r, err := New(slog.New(slog.NewTextHandler(&logs, nil)), &fakeOutbox{}, &fakePublisher{}, Config{Readiness: ready})
	require.NoError(t, err)
	ctx := context.Background()
	r.setKafkaReady(nil)
	r.setReady(ComponentPostgres, "")
	require.NoError(t, ready.Check())

	for _, state := range []string{"DOWN", "TRY_CONNECT", "CONNECT", "DOWN"} {
		r.setKafkaLack(ctx, "out[0]: its leader, broker 1, is not reachable (connection state "+state+")")
		require.ErrorContains(t, ready.Check(), "kafka: out[0]: its leader, broker 1, is not reachable (connection state "+state+")")
	}
	r.setKafkaReady(errors.New("no broker answers"))
	require.ErrorContains(t, ready.Check(), "kafka: no broker answers", "a probe's error first")
	r.setKafkaReady(nil)
	r.paused.Store(true)
	r.showKafkaReady()
	require.NoError(t, ready.Check(), "paused")
	r.paused.Store(false)
	r.setKafkaLack(ctx, "")
	require.NoError(t, ready.Check())
	require.Equal(t, 1, strings.Count(logs.String(), "but not the leaders of some partitions"), logs.String())
	require.Equal(t, 1, strings.Count(logs.String(), "reachable again"), logs.String())
}
