package store

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A session's read-only default comes from the settings of when it started
// (ALTER DATABASE or ALTER ROLE … SET default_transaction_read_only), so a
// session opened while the database was read-only stays read-only after the
// operator resets the setting, unless someone ends it. Kept in the pool, it
// failed every write of the relay's claims and marks and of the ingestor's
// retries until pgxpool retired it at its maximum lifetime, an hour later.
//
// So a pool counts the writes PostgreSQL refused as read-only (SQLSTATE
// 25006) on any of its sessions, and closes, instead of handing it out, a
// session opened before the latest refusal: the call connects anew and
// gets the settings of now, or, with a multi-host URL and
// target_session_attrs=read-write, the host that takes writes now. All of
// the older sessions, not only the refused one: a session that has only
// read (a probe, the pause flag) is just as read-only, and would fail the
// first write after the reset. While the database stays read-only, each
// refusal costs the pool its sessions (at most one reconnection per
// session per failed write, and writes are retried with a backoff).
//
// Behind PgBouncer in transaction mode this closes only the links to
// PgBouncer; its server connections keep their read-only setting until its
// server_lifetime (README, "Running behind PgBouncer").
//
// The check is the pool's PrepareConn, run when a connection is acquired,
// not its AfterRelease: pgxpool releases every connection through a
// goroutine of its own when AfterRelease is set, so a call right after
// another found no idle connection and the pool opened more.

// openedKey holds, in a session's CustomData, the pool's refusal count
// before the session was opened.
const openedKey = "store.refusalsAtOpen"

// readOnlyRefusals is a pool's pgx tracer (it only counts) and its
// connection hooks.
type readOnlyRefusals struct {
	n atomic.Uint64
}

// beforeConnect is the pool's BeforeConnect: it reads the count before the
// session starts, and records it in the session once connected. Read
// after the connect, a refusal counted while the session started
// read-only would pass for one before it, and the session would be kept.
func (r *readOnlyRefusals) beforeConnect(_ context.Context, cc *pgx.ConnConfig) error {
	n := r.n.Load()
	next := cc.AfterConnect
	cc.AfterConnect = func(ctx context.Context, pc *pgconn.PgConn) error {
		pc.CustomData()[openedKey] = n
		if next != nil {
			return next(ctx, pc)
		}
		return nil
	}
	return nil
}

// prepare is the pool's PrepareConn: false (close it, and acquire
// another) for a session opened before the latest refusal.
func (r *readOnlyRefusals) prepare(_ context.Context, conn *pgx.Conn) (bool, error) {
	at, _ := conn.PgConn().CustomData()[openedKey].(uint64)
	return at == r.n.Load(), nil
}

func (r *readOnlyRefusals) count(err error) {
	if sqlState(err) == "25006" {
		r.n.Add(1)
	}
}

func (r *readOnlyRefusals) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (r *readOnlyRefusals) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	r.count(data.Err)
}

func (r *readOnlyRefusals) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *readOnlyRefusals) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	r.count(data.Err)
}

func (r *readOnlyRefusals) TraceBatchEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	r.count(data.Err)
}
