package store

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Outbox runs the relay's queries on route_passport_outbox and the operator
// queries behind `outbox-relay stats|requeue|pause|resume`.
//
// # Why the queries look the way they do
//
// The claim changes only locked_until and lock_token, which no index covers,
// so on a page with room (the table has fillfactor 70) it is a HOT update that
// rewrites no index entry. It deliberately leaves updated_at alone: that
// column is in the FAILED partial index, and touching it would make every
// claim rewrite every index of the row. The one non-HOT update per event is
// the mark that moves the row out of PENDING.
//
// Every change after the claim names the lease token it was claimed with, so
// a relay whose lease expired (and whose rows another relay took over) changes
// nothing. Those statements find each lease by id, token and locked_until
// set, with no status = 'PENDING': a token with locked_until set is only on
// a PENDING row (the statements that end a lease keep its token and clear
// locked_until, outbox_marks.go; the operators' requeue clears both), so
// it already says PENDING, and the predicate would let the planner drive
// the join from the PENDING partial index. It does so when the last
// ANALYZE saw almost no PENDING row and a backlog has built since: every
// pending row is then read for every mark (2–27 s for 300 leases over
// 68,000 pending rows in the soak), and the slow marks grow the backlog
// that slows them. By id, the primary key serves each lease. For the same
// reason they tell the rows their lease already ended by status <>
// 'PUBLISHED', not by the status the row should have.
//
// Those statements are also planned on every call (leaseMode), never from
// a plan cached with the connection. The best way to the leased rows is a
// scan of the whole table while the table is a few pages, and the primary
// key once it is larger. With pgx's default mode (named prepared
// statements) PostgreSQL keeps a generic plan from the sixth call on, and
// nothing but an ANALYZE or a schema change replans it: a relay started on
// a new, empty outbox kept a hash join over the whole table (the mark then
// joined unnested ids and tokens), and each mark read the whole table (2,400 buffers to mark 4
// rows 30 s into a bench run at 100 passports/s, the outbox at 8,000 rows;
// autovacuum analyzes it after 50,000 changes).
type Outbox struct {
	pool *pgxpool.Pool
	// leaseMode is the first argument of the statements that find leases
	// by id and token: the pool's own mode unless that is pgx's default of
	// named prepared statements; then cache_describe, an unnamed statement
	// planned with each call's arrays (its parameters still binary, their
	// types cached). Every other mode plans each call already.
	leaseMode pgx.QueryExecMode
	orphans   orphanedClaims // failed claims whose leases may still be taken
	// readCommitted is set once a lease statement lost a serialization
	// race (see leaseTx).
	readCommitted atomic.Bool
}

// NewOutbox returns the outbox queries on pool.
func NewOutbox(pool *pgxpool.Pool) *Outbox {
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	if mode == pgx.QueryExecModeCacheStatement {
		mode = pgx.QueryExecModeCacheDescribe
	}
	return &Outbox{pool: pool, leaseMode: mode}
}

// asyncCommit ends the WHERE of every lease statement (the claim, the
// marks, the give-backs; the retry unless a row turns FAILED,
// asyncCommitUnlessFailed): its transaction commits without waiting for the
// WAL flush (synchronous_commit = off for that transaction only, so a
// pooler's next client does not get it, and the ingestor's writes still
// wait). It is an InitPlan, run once before the statement changes a row.
//
// A lease change needs no durability of its own: should the server crash
// or fail over before the WAL writer flushed it (at most three
// wal_writer_delay, 600 ms by default), a lost claim or mark leaves its
// rows due again, and they are published again, which at-least-once
// allows; a lost attempt count only allows one attempt more. Nothing
// ingested is lost: the ingest transaction and the rows it writes are
// flushed before the ingestor commits its offsets. The gain is on the
// path of every event: at 1,000 passports/s on the bench's 2-core VM,
// claims and marks were about 780 of the 980 WAL flushes a second, the
// claim's on the event's way to Kafka, and the ingest's commits queued
// behind them; without them the end-to-end p50 fell from 9.1–9.7 ms to
// 7.3–8.4 in three interleaved rounds (docs/performance.md).
const asyncCommit = `(select set_config('synchronous_commit', 'off', true)) = 'off'`

// querier is what a lease statement runs on: the pool (an implicit
// transaction) or an explicit transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// leaseTx runs fn, one lease statement, as a transaction of its own: on the
// pool, an implicit transaction at the session's default isolation, one
// round trip. The statements are written for read committed (SKIP LOCKED,
// lease tokens); where the database's or role's
// default_transaction_isolation is stricter, concurrent claims fail with
// serialization failures (40001) nearly every time, and no number of
// reruns got two workers through. So after the first serialization
// failure (never one at read committed; a deadlock does not count) every
// lease statement of this Outbox runs in an explicit READ COMMITTED
// transaction, two more round trips, until the process restarts. A
// conflict is run again (retryConflicts): PostgreSQL rolled it back.
func (o *Outbox) leaseTx(ctx context.Context, fn func(q querier) error) error {
	return retryConflicts(ctx, func() error {
		if o.readCommitted.Load() {
			return pgx.BeginTxFunc(ctx, o.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return fn(tx) })
		}
		err := fn(o.pool)
		if isSerializationFailure(err) {
			o.readCommitted.Store(true)
		}
		return err
	})
}

// exec runs one of the lease statements with leaseTx.
func (o *Outbox) exec(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
	err = o.leaseTx(ctx, func(q querier) error {
		tag, err = q.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// count is exec for a lease statement that returns one count.
func (o *Outbox) count(ctx context.Context, sql string, args ...any) (n int64, err error) {
	err = o.leaseTx(ctx, func(q querier) error {
		return q.QueryRow(ctx, sql, args...).Scan(&n)
	})
	return n, err
}
