package store_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestOpenDetectsDeadLinks: the pool's connections to a real PostgreSQL
// carry TCP_USER_TIMEOUT and keepalive, and the pool checks its idle
// connections every HealthCheckPeriod (unless the URL says otherwise).
func TestOpenDetectsDeadLinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Open(ctx, testenv.DatabaseURL(t), "test")
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, store.HealthCheckPeriod, pool.Config().HealthCheckPeriod)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tcp, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
	require.True(t, ok, "a TCP connection, got %T", conn.Conn().PgConn().Conn())
	raw, err := tcp.SyscallConn()
	require.NoError(t, err)
	var userTimeout, keepAlive, idle int
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		userTimeout, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		if serr == nil {
			keepAlive, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		}
		if serr == nil {
			idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		}
	}))
	require.NoError(t, serr)
	require.Equal(t, int(store.TCPUserTimeout.Milliseconds()), userTimeout)
	require.Equal(t, 1, keepAlive)
	require.Equal(t, int(store.TCPKeepAlive.Seconds()), idle)

	pool2, err := store.Open(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable&pool_health_check_period=7s", "test")
	require.NoError(t, err)
	defer pool2.Close()
	require.Equal(t, 7*time.Second, pool2.Config().HealthCheckPeriod, "the URL's value wins")
}

// TestReadOnlyIsAnOutage: a primary that came back as a standby (or any
// read-only server: SQLSTATE 25006), an administrator's shutdown (57P01)
// and a broken connection (08xxx) mean the database is unavailable, never
// that the record is bad.
func TestReadOnlyIsAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	pool, err := store.Open(ctx, url+"&options=-c%20default_transaction_read_only%3Don", "test")
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `update route_passport_outbox set attempts = attempts where false`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a server error, got %v", err)
	require.Equal(t, "25006", pgErr.Code)
	require.Equal(t, store.KindUnavailable, store.Classify(err))
	for _, code := range []string{"25006", "57P01", "57P03", "08006", "08001", "08000"} {
		require.Equal(t, store.KindUnavailable, store.Classify(&pgconn.PgError{Code: code}), code)
	}
}

// TestClosePoolGivesUpOnAConnectionThatIsNotReturned: a connection busy in
// a statement the server does not finish (here a long sleep; in production
// a hung server) keeps pgxpool's Close waiting; ClosePool returns after its
// wait instead.
func TestClosePoolGivesUpOnAConnectionThatIsNotReturned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Open(ctx, testenv.DatabaseURL(t), "test")
	require.NoError(t, err)

	qctx, cancelQuery := context.WithCancel(ctx)
	running := make(chan struct{})
	queryDone := make(chan struct{})
	go func() {
		defer close(queryDone)
		conn, err := pool.Acquire(qctx)
		if err != nil {
			close(running)
			return
		}
		defer conn.Release()
		close(running)
		_, _ = conn.Exec(qctx, "select pg_sleep(60)")
	}()
	<-running
	time.Sleep(100 * time.Millisecond) // the sleep has been sent

	start := time.Now()
	closed := store.ClosePool(pool, 500*time.Millisecond)
	took := time.Since(start)
	cancelQuery()
	<-queryDone
	require.False(t, closed, "the pool closed although a connection was still busy")
	require.Less(t, took, 5*time.Second)

	require.True(t, store.ClosePool(pool, 10*time.Second), "once the connection is back, the close completes")
}

// TestAMalformedURLSaysWhyWithoutTheString: the error of a connection
// string that does not parse names the setting and pgx's reason, and
// never the string (whose password pgx's own message may echo).
func TestAMalformedURLSaysWhyWithoutTheString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, reason string }{
		{"postgres://u:s3cret@[::1", "failed to parse as URL"},
		{"postgres://u:s3cret@h:notaport/db", "invalid port"},
		{"host=h port=notaport password=s3cret", "invalid port"},
		{"postgres://u:s3cret@h/db?pool_max_conns=many", "cannot parse pool_max_conns"},
		{"postgres://u:s3cret@h/db?connect_timeout=soon", "invalid connect_timeout"},
		{"postgres://u:s3cret@h/db?target_session_attrs=any-old", "unknown target_session_attrs value: any-old"},
	} {
		err := store.CheckURL(tc.url, "DATABASE_URL")
		require.Error(t, err, tc.url)
		var ue *store.URLError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, tc.reason, ue.Reason, "%q: %v", tc.url, err)
		require.Contains(t, err.Error(), "DATABASE_URL: invalid connection string: "+tc.reason)
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), "notaport")

		_, err = store.Open(context.Background(), tc.url, "test")
		require.ErrorAs(t, err, &ue)
		require.Equal(t, tc.reason, ue.Reason)
	}
}
