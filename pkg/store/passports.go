package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/pkg/passport"
)

// Passports writes accepted passports with their outbox rows.
type Passports struct {
	pool        *pgxpool.Pool
	maxAttempts int
	// reserve: the write's first argument reserves pgx's parameter buffer
	// ([reserved]). Not in the simple protocol, where pgx encodes each
	// argument into a buffer of its own and the reservation would only
	// allocate the whole write's size for the first argument's text.
	reserve bool
	// KeptOut, when set (before the first write), is told after each write
	// that committed how many of its routes it kept out, because their
	// rows hold a later record of the same partition (writeSQL). Called
	// only when there were some.
	KeptOut func(ctx context.Context, routes int64)
}

// NewPassports returns the ingest writer over pool; maxAttempts is stored in
// each new outbox row's max_attempts (OUTBOX_MAX_ATTEMPTS).
func NewPassports(pool *pgxpool.Pool, maxAttempts int) *Passports {
	reserve := pool.Config().ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol
	return &Passports{pool: pool, maxAttempts: maxAttempts, reserve: reserve}
}

// Ping makes one round trip to the database.
func (s *Passports) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Write writes accepted in a transaction of its own and then notifies
// [NotifyChannel], in one round trip: BEGIN, the statements and COMMIT go in
// one pipeline, the notification after them. Nothing is left to commit; on
// an error nothing was written, or, when the connection broke after the
// pipeline was sent, possibly everything (writing again is harmless: see
// [Passports.BeginWrite] for what is written).
//
// The notification is a transaction of its own, which commits without
// waiting for its WAL flush, because PostgreSQL commits notifying
// transactions one at a time: each holds a database-wide lock from its
// commit's start to its end, WAL flush included. Notifying inside the write,
// concurrent writes would flush one after the other; this way they can
// share a flush, and the lock is held for microseconds. The notification
// only wakes the relay early, which polls too: one lost to a crash, or
// failing after the commit, delays events but loses none, and Write still
// returns nil.
func (s *Passports) Write(ctx context.Context, accepted []passport.Accepted) error {
	if len(accepted) == 0 {
		return nil
	}
	args, n, err := s.writeArgs(accepted)
	if err != nil {
		return err
	}
	var kept int64
	err = retryConflicts(ctx, func() error {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release() // a connection left in a failed transaction is closed
		b := &pgx.Batch{}
		// Explicitly read committed: see BeginWrite.
		b.Queue(beginSQL)
		b.Queue(writeSQL, lendBuffers(c.Conn().PgConn(), args)...)
		b.Queue("commit")
		b.Queue(hintSQL, NotifyChannel)
		tags, err := sendCommitted(c.SendBatch(ctx, b), b.Len()-1)
		if err != nil {
			rollbackFailed(ctx, c.Conn(), err)
			return err
		}
		kept = tags[1].RowsAffected() // writeSQL's rows: the routes it kept out
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d passports: %w", n, err)
	}
	s.reportKeptOut(ctx, kept)
	return nil
}

// reportKeptOut tells KeptOut, when set, of the routes a committed write
// kept out.
func (s *Passports) reportKeptOut(ctx context.Context, kept int64) {
	if kept > 0 && s.KeptOut != nil {
		s.KeptOut(ctx, kept)
	}
}

// beginSQL begins a transaction at read committed, the level the write's
// statements are written for.
const beginSQL = "begin isolation level read committed"

// hintSQL notifies the channel given as $1 in a transaction that commits
// without waiting for its WAL flush (set_config's third argument keeps the
// setting to that transaction).
const hintSQL = "select set_config('synchronous_commit', 'off', true), pg_notify($1, '')"

// sendCommitted reads the results of br, whose first committed queries end
// with a COMMIT, and returns their command tags or the first error among
// them. The results after the COMMIT are read and their errors dropped: the
// write holds. On an error the connection is left in the failed
// transaction (rollbackFailed).
func sendCommitted(br pgx.BatchResults, committed int) ([]pgconn.CommandTag, error) {
	tags := make([]pgconn.CommandTag, committed)
	for i := range committed {
		var err error
		if tags[i], err = br.Exec(); err != nil {
			_ = br.Close() // the same error
			return nil, err
		}
	}
	_ = br.Close()
	return tags, nil
}

// rollbackFailed ends the failed transaction that a write's error left on
// conn, so that the pool keeps the connection (it closes one released
// inside a transaction) and with it the write buffers it keeps
// (connbuf.go), when the error belongs to the data or to a race (KindRecord,
// KindConflict: a constraint, a deadlock run again): such a write costs a
// round trip, not a new connection. A session the database as a whole
// refused (KindUnavailable: read-only, a statement timeout, shutting down)
// is left to the pool to close, so that the retry connects anew and gets
// the server's settings of now and the host that takes writes now (a
// multi-host URL with target_session_attrs=read-write): kept, a session
// made read-only by ALTER DATABASE kept failing after the setting was
// reset, until the pool retired it an hour later. The rollback runs even
// when ctx has ended, for at most rollbackTimeout.
func rollbackFailed(ctx context.Context, conn *pgx.Conn, err error) {
	if k := Classify(err); k != KindRecord && k != KindConflict {
		return
	}
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_, _ = conn.Exec(rctx, "rollback")
}

// WriteTx is an ingest transaction that has run its statements, as
// [Passports.BeginWrite] returns it.
type WriteTx interface {
	// Commit commits the transaction and releases its connection.
	Commit(ctx context.Context) error
	// Rollback abandons it and releases its connection, even after ctx
	// ended; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

// BeginWrite begins a transaction on a connection of its own and writes
// accepted in it, in one round trip (the BEGIN goes in the statements'
// pipeline). The caller must end it with Commit or Rollback; on an error
// the transaction is already rolled back.
//
// Splitting the statements from the commit lets the ingestor pipeline
// batches: the next batch's statements run while this one's commit waits
// for its WAL flush, and a batch commits only after its predecessor did.
//
// maxIdle, when positive, is how long at most the transaction may then sit
// idle before the server ends the session (idle_in_transaction_session_timeout,
// set for this transaction only, so a pooler's next client does not get
// it; an operator's stricter setting is kept). Should the caller's process freeze or its node vanish while it
// holds the transaction, its row locks would otherwise stay until the
// server's TCP keepalive noticed, hours later, and the ingestor that took
// its partitions over would wait on them all that time.
//
// It upserts the passports of accepted by route_id (last write wins, but
// not over a later record of the same partition: see writeSQL;
// updated_at = statement_timestamp(), created_at kept), inserts the two
// outbox rows of each route the write inserts (a route already in
// route_passports gets none, even after retention deleted its events: see
// writeSQL), and notifies [NotifyChannel].
//
// accepted are in input order and may name a route more than once: the
// route's row gets the last record, while the outbox rows get the first
// one's events, as if the records had been written one transaction each
// (but for a route whose records come from two partitions in one batch
// against a row that holds a later record of one of them: the batch's last
// record is the one checked against the row, writeSQL).
//
// Rows are sent as arrays and expanded with unnest, in route_id order, so
// that concurrent writers take row locks in the same order.
//
// Times are statement_timestamp(), not now(): the ingestor pipelines
// transactions, so a later write of a route may run in a transaction that
// started before the one that inserted it, and now() (the transaction
// start) would then put updated_at before created_at.
func (s *Passports) BeginWrite(ctx context.Context, accepted []passport.Accepted, maxIdle time.Duration) (WriteTx, error) {
	b := &pgx.Batch{}
	// Explicitly: the database's or role's default may be stricter, and
	// concurrent writes would then lose serialization races.
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if maxIdle > 0 {
		b.Queue(idleBoundSQL, max(maxIdle.Milliseconds(), 1))
	}
	args, n, err := s.writeArgs(accepted)
	if err != nil {
		return nil, err
	}
	var kept int64
	if n > 0 {
		b.Queue(writeSQL, args...).Exec(func(ct pgconn.CommandTag) error {
			kept = ct.RowsAffected() // writeSQL's rows: the routes it kept out
			return nil
		})
		b.Queue(notifySQL, NotifyChannel)
	}
	br := s.pool.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = (&passportTx{tx: tx}).Rollback(ctx)
		return nil, fmt.Errorf("begin and write %d passports: %w", n, err)
	}
	return &passportTx{tx: tx, kept: kept, s: s}, nil
}

// idleBoundSQL sets idle_in_transaction_session_timeout to $1 milliseconds
// for the current transaction only, unless the operator's setting (server,
// database, role) is already as strict: the setting shows with its unit
// ("500ms", "1min"), which reads as an interval.
const idleBoundSQL = `select set_config('idle_in_transaction_session_timeout', p.ms::text, true)
  from (select $1::bigint as ms) p
 where current_setting('idle_in_transaction_session_timeout')::interval = interval '0'
    or current_setting('idle_in_transaction_session_timeout')::interval > p.ms * interval '1 millisecond'`

// passportTx is one ingest transaction.
type passportTx struct {
	tx pgx.Tx
	// kept is how many routes its write kept out, reported to s once it
	// commits.
	kept int64
	s    *Passports
}

// Commit commits the transaction.
func (t *passportTx) Commit(ctx context.Context) error {
	if err := t.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit ingest transaction: %w", err)
	}
	t.s.reportKeptOut(ctx, t.kept)
	return nil
}

// rollbackTimeout bounds a rollback: on a broken connection it fails fast
// anyway, and the server ends the transaction when the connection closes.
const rollbackTimeout = 5 * time.Second

// Rollback abandons the transaction; it is safe to call after Commit. It
// runs even when ctx has ended (a write cut short by its deadline must
// still give its connection back clean), for at most rollbackTimeout.
func (t *passportTx) Rollback(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	err := t.tx.Rollback(rctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("rollback ingest transaction: %w", err)
	}
	return nil
}
