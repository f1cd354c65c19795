package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestListenHearsNotifications: the listener connects with the URL the
// pool takes (pool settings included: DATABASE_LISTEN_URL defaults to
// DATABASE_URL), reports the connection, and hears a NOTIFY on the
// channel.
func TestListenHearsNotifications(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	u := testenv.DatabaseURL(t)
	pool, err := store.Open(ctx, u, "test")
	require.NoError(t, err)
	defer pool.Close()

	relisten := make(chan struct{}, 1)
	l := startListener(ctx, withPoolSettings(u), relisten)
	defer func() {
		cancel()
		<-l.done
	}()
	l.waitConnected(t)
	// LISTEN runs right after the connect callback; notify until heard.
	heard := func() {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			_, err := pool.Exec(ctx, "select pg_notify($1, '')", store.NotifyChannel)
			require.NoError(t, err)
			select {
			case <-l.notified:
				return
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				t.Fatal("no notification heard within 10s")
			}
		}
	}
	heard()

	// relisten: a new connection (its backend pid differs), which hears.
	var before int
	require.NoError(t, pool.QueryRow(ctx, `select pid from pg_stat_activity where query ilike 'listen%' and datname = current_database() order by backend_start desc limit 1`).Scan(&before))
	relisten <- struct{}{}
	l.waitConnected(t)
	heard()
	var after int
	require.NoError(t, pool.QueryRow(ctx, `select pid from pg_stat_activity where query ilike 'listen%' and datname = current_database() order by backend_start desc limit 1`).Scan(&after))
	require.NotEqual(t, before, after, "a new connection")
}

// TestListenOutlivesIdleSessionTimeout: with idle_session_timeout set for
// the database (as an operator may set it for a role or the server), the
// listener's idle session is not ended by PostgreSQL: it connects once and
// still hears after several timeouts. Without lifting the setting for its
// session it reconnected every timeout (FATAL 57P05), each time a warning.
func TestListenOutlivesIdleSessionTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	u := testenv.DatabaseURL(t)
	pool, err := store.Open(ctx, u, "test")
	require.NoError(t, err)
	defer pool.Close()
	var db string
	require.NoError(t, pool.QueryRow(ctx, "select current_database()").Scan(&db))
	_, err = pool.Exec(ctx, "alter database "+pgx.Identifier{db}.Sanitize()+" set idle_session_timeout = '200ms'")
	require.NoError(t, err)

	l := startListener(ctx, u, nil)
	defer func() {
		cancel()
		<-l.done
	}()
	l.waitConnected(t)

	time.Sleep(1500 * time.Millisecond) // 7 timeouts
	_, err = pool.Exec(ctx, "select pg_notify($1, '')", store.NotifyChannel)
	require.NoError(t, err)
	select {
	case <-l.notified:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification heard within 5s")
	}
	require.Empty(t, l.connected, "the listener reconnected: its idle session was ended")
}

// listener is a store.Listen running in the background.
type listener struct {
	connected, notified chan struct{}
	done                chan error // Listen's result
}

func startListener(ctx context.Context, url string, relisten <-chan struct{}) *listener {
	l := &listener{connected: make(chan struct{}, 16), notified: make(chan struct{}, 16), done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		l.done <- store.Listen(ctx, logger, url, 50*time.Millisecond,
			func() { l.notified <- struct{}{} }, func() { l.connected <- struct{}{} }, relisten)
	}()
	return l
}

// waitConnected waits for the listener's next (re)connect.
func (l *listener) waitConnected(t *testing.T) {
	t.Helper()
	select {
	case <-l.connected:
	case err := <-l.done:
		t.Fatalf("Listen returned before connecting: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not connect within 10s")
	}
}
