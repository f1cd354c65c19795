package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// A session's read-only default comes from the settings of when it started
// (ALTER DATABASE or ALTER ROLE … SET default_transaction_read_only), so a
// session that PostgreSQL refused a write as read-only (SQLSTATE 25006)
// stays read-only after the operator resets the setting, unless someone
// ends it. Kept in the pool, it failed every write of the relay's claims
// and marks and of the ingestor's retries until pgxpool retired it at its
// maximum lifetime, an hour later. readOnlyTracer marks such a session,
// and the pool closes it instead of handing it out (retireReadOnly): the
// call connects anew and gets the settings of now, or, with a multi-host
// URL and target_session_attrs=read-write, the host that takes writes now.
//
// The check is the pool's PrepareConn, run when a connection is acquired,
// not its AfterRelease: pgxpool releases every connection through a
// goroutine of its own when AfterRelease is set, so a call right after
// another found no idle connection and the pool opened more.

// readOnlyKey marks a session refused as read-only in its CustomData.
const readOnlyKey = "store.readOnly"

// readOnlyTracer is the pool connections' pgx tracer; it only marks.
type readOnlyTracer struct{}

func (readOnlyTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (readOnlyTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	markReadOnly(conn, data.Err)
}

func (readOnlyTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (readOnlyTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	markReadOnly(conn, data.Err)
}

func (readOnlyTracer) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	markReadOnly(conn, data.Err)
}

func markReadOnly(conn *pgx.Conn, err error) {
	if sqlState(err) == "25006" {
		conn.PgConn().CustomData()[readOnlyKey] = true
	}
}

// retireReadOnly is the pool's PrepareConn: false (close it, and acquire
// another) for a session refused as read-only.
func retireReadOnly(_ context.Context, conn *pgx.Conn) (bool, error) {
	_, marked := conn.PgConn().CustomData()[readOnlyKey]
	return !marked, nil
}
