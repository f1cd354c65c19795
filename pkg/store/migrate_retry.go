package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pcp/route-processing/pkg/backoff"
)

// migrateLockTimeout is the lock_timeout of each migration that runs in a
// transaction, unless the run's DATABASE_URL sets one. A migration's ALTER TABLE (AccessExclusiveLock:
// 005 on the passports and the outbox, 007 on outbox_relay_control, which
// every relay claim reads) queues behind any long reader (pg_dump, a
// report, the relay's REINDEX CONCURRENTLY), and every later statement on
// the table queues behind it: without a bound ingest reads waited 13.3 s
// and claims 8.1 s (PostgreSQL 15), and could wait up to the run's bound.
// With it a try gives up after half a second and the run tries again
// (retryLockTimeouts), the service's statements going through in between.
// Half a second stays below the binaries' stall checks (a call
// outstanding for a second is probed, and one queued behind another
// application's lock is taken for a database outage): at 3 s every try
// made the ingestor pause and turn not ready (a review measured 2.9-s
// stalls, 57 stall probes in 25 s, behind a report holding the table).
// Without a long reader the service's transactions end in milliseconds,
// and the lock is had in the first try.
const migrateLockTimeout = 500 * time.Millisecond

// lockNotAvailable is SQLSTATE lock_not_available, what lock_timeout ends
// a wait with.
const lockNotAvailable = "55P03"

// migrateRetryMin and migrateRetryMax bound the waits between two tries of
// a migration that gave up waiting for a table lock: a blocker that ends
// soon (a report) is followed quickly, one that lasts (pg_dump) is asked
// at most every 30 s, the service's statements flowing in between, until
// the run's bound.
const (
	migrateRetryMin = time.Second
	migrateRetryMax = 30 * time.Second
)

// migrateBlockerPoll is how often, while a migration runs, a second session
// asks whom the migrate session waits for.
const migrateBlockerPoll = 250 * time.Millisecond

// MigrateRetry is a migration that gave up waiting for a table lock
// (lock_timeout) and is tried again.
type MigrateRetry struct {
	// Migration is the migration's file ("007_outbox_maintenance_lease.sql"),
	// empty when the wait was tern's own lock, before any migration.
	Migration string
	// Blockers are the sessions it waited for, as last seen while it
	// waited; empty if it was not seen waiting.
	Blockers []Blocker
	// Tries counts the tries that gave up so far; Next is the wait before
	// the next one.
	Tries int
	Next  time.Duration
}

// MigrateRetrying is told of each try of a migrate run that gave up waiting
// for a table lock, before the wait for the next.
type MigrateRetrying func(MigrateRetry)

// retryLockTimeouts runs try until it ends other than on lock_timeout
// (lockNotAvailable), telling retrying of each try that did, and waiting
// between tries (backoff) until ctx ends.
func retryLockTimeouts(ctx context.Context, watch lockWaitWatch, retrying MigrateRetrying, try func() error) error {
	wait := backoff.New(migrateRetryMin, migrateRetryMax)
	for tries := 1; ; tries++ {
		blockers, err := watch.during(ctx, try)
		if sqlState(err) != lockNotAvailable {
			return err
		}
		next := wait.Next()
		if retrying != nil {
			var mErr migrate.MigrationPgError
			errors.As(err, &mErr)
			retrying(MigrateRetry{Migration: mErr.MigrationName, Blockers: blockers, Tries: tries, Next: next})
		}
		if !backoff.Sleep(ctx, next) {
			return fmt.Errorf("gave up waiting for a table lock %d times (lock_timeout), until the run's bound: %w (%w)", tries, err, ctx.Err())
		}
	}
}

// lockWaitWatch names, from a second session, the sessions that a migrate
// session waits for a lock of: once lock_timeout has ended the wait,
// pg_blocking_pids no longer shows whom it was.
type lockWaitWatch struct {
	side *pgx.Conn // nil: no second session, blockers go unnamed
	pid  uint32    // the migrate session's backend
}

// during runs try, asking every migrateBlockerPoll whom the migrate session
// waits for; it returns the sessions last seen blocking it, and try's
// error.
func (w lockWaitWatch) during(ctx context.Context, try func() error) ([]Blocker, error) {
	if w.side == nil {
		return nil, try()
	}
	stop := make(chan struct{})
	seen := make(chan []Blocker)
	go func() {
		var last []Blocker
		tick := time.NewTicker(migrateBlockerPoll)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				seen <- last
				return
			case <-tick.C:
				if b := blockersOf(ctx, w.side, w.pid); len(b) > 0 {
					last = b
				}
			}
		}
	}()
	err := try()
	close(stop)
	return <-seen, err
}

// blockersOf lists the sessions that backend pid waits for a lock of; none
// if it waits for none, or if the question fails (it only names them in a
// report). pg_blocking_pids is asked only while pid waits: it takes the
// lock manager's locks.
func blockersOf(ctx context.Context, conn *pgx.Conn, pid uint32) []Blocker {
	ctx, cancel := context.WithTimeout(ctx, 4*migrateBlockerPoll)
	defer cancel()
	out, err := blockersWhere(ctx, conn, "w.pid = $1 and w.wait_event_type = 'Lock'", int64(pid))
	if err != nil {
		return nil
	}
	return out
}
