package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// /readyz shows the kind of a database failure, never pgx's message with the
// user, database and host: the errors here are the real ones pgx returns.
func TestDBSymptomHidesConnectionDetails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead, err := testenv.FreeAddr()
	require.NoError(t, err)
	live, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	noDB := *live
	noDB.Path = "/no_such_database_x"
	slow, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()

	for _, tc := range []struct {
		name, url string
		ctx       context.Context
		want      string
	}{
		{"refused", "postgres://pcp_user:pw@" + dead + "/pcp_db", ctx, "connection refused"},
		{"no such database", noDB.String(), ctx, "server error, SQLSTATE 3D000"},
		{"timed out", live.String(), slow, "no answer in time"},
	} {
		pool, err := store.Open(ctx, tc.url, "test")
		require.NoError(t, err, tc.name)
		err = pool.Ping(tc.ctx)
		pool.Close()
		require.Error(t, err, tc.name)
		got := dbSymptom(fmt.Errorf("claim outbox batch: %w", err))
		require.Equal(t, tc.want, got, "%s: %v", tc.name, err)
		for _, secret := range []string{"pcp_user", "pcp_db", "no_such_database_x", dead, live.Host} {
			require.NotContains(t, got, secret, tc.name)
		}
	}
	require.Equal(t, "", dbSymptom(nil))
	// A probe that ran out of its wait says how long it waited: the wait
	// grows on a slow link and after misses, and sets how soon an outage
	// shows.
	require.Equal(t, "no answer within 2s", dbSymptom(&backoff.MissError{Wait: 2 * time.Second, Err: context.DeadlineExceeded}))

	// A database nobody migrated: the symptom says what to do.
	pool, err := store.Open(ctx, testenv.EmptyDatabaseURL(t), "test")
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "select 1 from route_passport_outbox")
	require.Error(t, err)
	require.Equal(t, "schema missing or older than this build (SQLSTATE 42P01): run `ingestor migrate`", dbSymptom(err))
}

// pausedOutbox reads the pause flag as set and answers, like a database
// that serves reads.
type pausedOutbox struct{ fakeOutbox }

func (p *pausedOutbox) Control(context.Context) (outbox.Control, error) {
	return outbox.Control{Paused: true}, nil
}

// While Kafka is down the pause-flag read reports the database, but never
// over a failure another call reported: a paused relay whose release keeps
// failing (a read-only database answers reads) stays not ready instead of
// alternating with each read. And a failed read clears dbUp, so that the
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

	r.dbUp.Store(true)
	r.showDBWhileNoClaims(context.Background(), errors.New("connection refused"))
	require.False(t, r.dbUp.Load(), "a failed read leaves the next successful claim to report ready")
}
