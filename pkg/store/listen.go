package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
)

// NotifyChannel is the LISTEN/NOTIFY channel on which the ingestor tells the
// relays that new outbox rows are waiting.
const NotifyChannel = "route_passport_outbox"

// notifySQL sends one (empty) notification on the channel given as $1.
const notifySQL = "select pg_notify($1, '')"

// Notify sends one notification on NotifyChannel, as a write does; the
// relay sends it to check that its LISTEN hears.
func (o *Outbox) Notify(ctx context.Context) error { return notify(ctx, o.pool) }

// notify sends one notification on NotifyChannel through q: at once on the
// pool, at its commit in a transaction.
func notify(ctx context.Context, q querier) error {
	if _, err := q.Exec(ctx, notifySQL, NotifyChannel); err != nil {
		return fmt.Errorf("notify %s: %w", NotifyChannel, err)
	}
	return nil
}

// Listen LISTENs on NotifyChannel on a dedicated connection and calls
// notified for every notification, and connected once after each
// (re)connect, since notifications sent while it was disconnected are lost.
// It reconnects after reconnectDelay until ctx ends, logging each lost
// connection.
//
// The connection must reach PostgreSQL directly, or through a pooler in
// session mode: behind transaction pooling LISTEN succeeds but nothing is
// ever delivered (the server connection that ran it goes back to the pool).
// Hence DATABASE_LISTEN_URL; the relay notices a listener that hears nothing
// (relay.Relay.Connected probes it).
//
// A value on relisten (nil: never) drops the connection and connects anew:
// a connection can hang without an error (its server frozen, a standby
// promoted while the old primary's link holds every byte), and then only
// the relay can tell, from the notifications that do not arrive.
func Listen(ctx context.Context, logger *slog.Logger, databaseURL string, reconnectDelay time.Duration, notified, connected func(), relisten <-chan struct{}) error {
	cfg, err := connConfig(databaseURL, "DATABASE_LISTEN_URL")
	if err != nil {
		return err
	}
	// Log the first failure of an outage as a warning and the retries at
	// debug level; a successful (re)connect re-arms the warning.
	var quiet atomic.Bool
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return connectListener(ctx, cfg)
		},
		LogError: func(ctx context.Context, err error) {
			switch {
			case ctx.Err() != nil:
			case quiet.Swap(true):
				logger.DebugContext(ctx, "outbox listener still disconnected", "err", err)
			default:
				logger.WarnContext(ctx, "outbox listener lost its connection; reconnecting (polling meanwhile)", "err", err, "retry_every", reconnectDelay)
			}
		},
		ReconnectDelay: reconnectDelay,
	}
	l.Handle(NotifyChannel, wakeHandler(func(conn bool) {
		if conn {
			quiet.Store(false)
			connected()
			return
		}
		notified()
	}))
	for {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- l.Listen(lctx) }()
		select {
		case err := <-done:
			cancel()
			return err
		case <-relisten:
			cancel()
			<-done
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logger.DebugContext(ctx, "outbox listener: connecting anew, its notifications do not arrive")
		}
	}
}

// keepListenerSession lifts idle_session_timeout (PostgreSQL 14+) for the
// listener's session alone. A LISTEN session is idle by design: with the
// timeout set for the role or the server, PostgreSQL ended it every
// timeout (FATAL 57P05), each time a warning, notifications lost until the
// reconnect, and the relay polling meanwhile. The pools need nothing:
// pgxpool pings a connection idle for over a second before handing it out.
// Nothing is SET where the setting is already 0, or unknown (before 14:
// current_setting's missing_ok gives NULL), so a listener that runs through
// a pooler leaves no session state behind it in the common case.
const keepListenerSession = `select set_config('idle_session_timeout', '0', false)
 where current_setting('idle_session_timeout', true) <> '0'`

// connectListener connects the listener's session and keeps PostgreSQL from
// ending it for being idle.
func connectListener(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, keepListenerSession); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("lift idle_session_timeout for the listener: %w", err)
	}
	return conn, nil
}

// wakeHandler is called with false for a notification and with true after
// each (re)connect.
type wakeHandler func(connected bool)

func (w wakeHandler) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	w(false)
	return nil
}

// HandleBacklog runs after each (re)connect: rows inserted while no LISTEN
// was active sent notifications nobody heard.
func (w wakeHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	w(true)
	return nil
}
