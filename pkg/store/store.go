// Package store is the service's only door to PostgreSQL: the connection pool,
// the embedded tern migrations, the ingest write (passport upsert plus its two
// outbox rows in one transaction) and the outbox queries of the relay.
//
// Callers branch on errors through [Classify], which tells a database that is
// unavailable as a whole (pause and retry) from one that rejects a single
// record (dead-letter it).
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// VersionTable is tern's bookkeeping table.
const VersionTable = "schema_version"

// DefaultConnectTimeout bounds a connection attempt of [Open]'s pool when
// the URL sets no connect_timeout: long enough for a TLS handshake over a
// slow link, short enough that a host that drops packets fails the attempt
// (and the next host of a multi-host URL is tried) within seconds, not the
// kernel's minutes.
const DefaultConnectTimeout = 10 * time.Second

// Dead-connection detection of [Open]'s pool, for links that stop carrying
// bytes without a reset (half-open TCP, a firewall that drops state, a
// failed-over address):
//
//   - TCPKeepAlive: idle connections send a keepalive probe after this long
//     idle and every this long after (Go's net.KeepAliveConfig, count 3), so
//     a pooled connection that died while idle is closed by the kernel
//     within ~4× this instead of hours (Linux's default is 2 h).
//   - TCPUserTimeout (Linux TCP_USER_TIMEOUT): a connection whose sent bytes
//     stay unacknowledged this long is closed by the kernel, so a query
//     written into a blackhole fails even while the caller has no deadline
//     of its own. It must exceed a normal round trip under load by far:
//     it never cuts a slow query (the server acknowledges the bytes at once
//     and the connection is idle, not unacknowledged, while it runs).
//   - HealthCheckPeriod: how often the pool closes the idle connections
//     past their lifetime or idle time; it sends nothing, so it finds no
//     dead connection. A connection idle over a second is pinged before it
//     is handed out (pgxpool's default), and one whose backend is gone
//     (a failover, a terminated session) within that second fails its
//     first call, which reads as the database being unavailable: the
//     caller's retry gets another connection.
const (
	TCPKeepAlive      = 5 * time.Second
	TCPUserTimeout    = 10 * time.Second
	HealthCheckPeriod = 5 * time.Second
)

// Open creates a pool; it connects lazily (an unreachable server fails the
// first call, not Open), so a binary starts, not ready, while the database
// is down. Only a URL that does not parse is an error here. The URL may carry
// pgxpool settings such as pool_max_conns and pool_health_check_period,
// connect_timeout (default [DefaultConnectTimeout]) and a multi-host list
// with target_session_attrs=read-write (failover: each connection goes to
// whichever host accepts writes). Its connections detect dead links (see
// [TCPKeepAlive]) and carry application as their application_name unless
// the URL names one: operators tell the binaries apart in
// pg_stat_activity, and [Passports.Stuck] tells the writer's own sessions
// from the others. A session opened before PostgreSQL last refused one of
// the pool's writes as read-only is closed, not handed out again
// (readonly.go).
func Open(ctx context.Context, databaseURL, application string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, urlError(err, "DATABASE_URL")
	}
	configureConn(cfg.ConnConfig)
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" && application != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = application
	}
	if !strings.Contains(databaseURL, "pool_health_check_period") {
		cfg.HealthCheckPeriod = HealthCheckPeriod
	}
	// A session opened before a write was refused as read-only is closed,
	// not handed out again (readonly.go).
	refusals := &readOnlyRefusals{}
	cfg.ConnConfig.Tracer = refusals
	cfg.BeforeConnect = refusals.beforeConnect
	cfg.PrepareConn = refusals.prepare
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		registerTypes(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	return pool, nil
}

// PoolCloseWait is how long the binaries let [ClosePool] wait on the way
// out: a healthy pool closes in milliseconds, and the whole shutdown must
// fit in the 30 s of contract §5.
const PoolCloseWait = 2 * time.Second

// ClosePool closes pool, waiting at most wait, and reports whether it
// closed in time. pgxpool's Close waits until every connection has been
// returned and has said goodbye to the server, which never happens while
// the server or the link hangs (a frozen primary, a blackhole): a relay
// stopping then took 33 s, past the 30 s of contract §5. When it gives up,
// the exiting process drops the connections, and the server ends their
// sessions (and rolls back what was open) when it notices.
func ClosePool(pool *pgxpool.Pool, wait time.Duration) bool {
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
		return true
	case <-time.After(wait):
		return false
	}
}

// configureConn applies the connect timeout and the dead-link detection of
// [Open] to one connection's configuration (the pool's, the listener's).
func configureConn(cfg *pgx.ConnConfig) {
	if cfg.ConnectTimeout == 0 {
		// Without connect_timeout (URL or PGCONNECT_TIMEOUT) a connection
		// attempt to a host that drops packets hangs for the kernel's TCP
		// timeout, minutes.
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: TCPKeepAlive, Interval: TCPKeepAlive, Count: 3},
		Control:         setUserTimeout(TCPUserTimeout),
	}
	cfg.DialFunc = d.DialContext
	cfg.OnPgError = closeOnFatal
}

// closeOnFatal is pgconn's OnPgError: the connection is closed after a
// FATAL or PANIC error (the backend is gone). pgx's default compares the
// severity as the server sent it, translated by lc_messages ("ВАЖНО" on a
// Russian server), and so kept reading a dead connection there and
// returned "unexpected EOF" instead of the error and its SQLSTATE
// (57P01 on a terminated backend); the unlocalized severity is the same
// in every language.
func closeOnFatal(_ *pgconn.PgConn, e *pgconn.PgError) bool {
	return !isFatal(e)
}

// isFatal reports whether e ended its session.
func isFatal(e *pgconn.PgError) bool {
	sev := cmp.Or(e.SeverityUnlocalized, e.Severity) // servers before 9.6 send no unlocalized one
	return sev == "FATAL" || sev == "PANIC"
}

// URLError is a connection string that does not parse. It names the
// setting and pgx's reason ("invalid port", "cannot parse pool_max_conns"),
// never the string: pgx's own message echoes it, password included when
// the string is too malformed to redact, and so does the error it wraps
// (net/url's quotes the whole URL).
type URLError struct {
	// Var is the variable that holds the string (DATABASE_URL).
	Var string
	// Reason is pgx's description of what does not parse, without the
	// string; empty when pgx gave none.
	Reason string
}

func (e *URLError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("%s: invalid connection string (see the pgx/libpq URL and key=value forms)", e.Var)
	}
	return fmt.Sprintf("%s: invalid connection string: %s (see the pgx/libpq URL and key=value forms)", e.Var, e.Reason)
}

// Setting makes a *URLError a configuration error to the mains (exit
// status 2: fix the deployment, retrying will not help).
func (e *URLError) Setting() string { return e.Var }

// urlError turns pgx's parse error into a [URLError] for setting.
func urlError(err error, setting string) *URLError {
	return &URLError{Var: setting, Reason: parseReason(err)}
}

// parseReason is the message pgx's ParseConfigError was made with. pgx
// keeps it unexported, so it is read from the text of a copy whose string
// is empty: that text is a fixed prefix, the message, and the wrapped
// error's text in parentheses when there is one. Anything else gives "".
func parseReason(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return ""
	}
	blank := *pce
	blank.ConnString = ""
	reason, ok := strings.CutPrefix(blank.Error(), "cannot parse ``: ")
	if !ok {
		return ""
	}
	if inner := pce.Unwrap(); inner != nil {
		reason, ok = strings.CutSuffix(reason, " ("+inner.Error()+")")
		if !ok {
			return ""
		}
	}
	return reason
}

// CheckURL parses databaseURL as [Open] does, so that a malformed string
// stops a process at start, naming setting, before anything connects.
func CheckURL(databaseURL, setting string) error {
	if _, err := pgxpool.ParseConfig(databaseURL); err != nil {
		return urlError(err, setting)
	}
	return nil
}

// connConfig parses databaseURL for a single connection outside the pool
// (migrations, the listener), with the connect timeout and dead-link
// detection of [Open]. It parses as the pool does, so that the pool_*
// settings a URL may carry for [Open] are taken out: pgx.ParseConfig would
// send them to the server as run-time parameters, which PostgreSQL refuses
// ("unrecognized configuration parameter"). setting names the URL in the
// error.
func connConfig(databaseURL, setting string) (*pgx.ConnConfig, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, urlError(err, setting)
	}
	configureConn(cfg.ConnConfig)
	return cfg.ConnConfig, nil
}
