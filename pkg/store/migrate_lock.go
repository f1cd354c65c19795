package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/backoff"
)

// migrateLockKey is the session advisory lock that serialises migrate runs
// (any number, other than tern's own).
const migrateLockKey = int64(0x7063705f6d696772) // "pcp_migr"

// migrateLockPoll is how often a migrate run asks for migrateLockKey while
// another holds it.
const migrateLockPoll = 200 * time.Millisecond

// MigrateWaitReport is how often a waiting migrate run reports who holds
// migrateLockKey, after a first report at its first refusal.
const MigrateWaitReport = 30 * time.Second

// MigrateLockHolder is the session that holds the migration lock while a
// migrate run waits for it: what an operator needs to find it (and end it
// with pg_terminate_backend if it is stuck). Fields the server does not
// show this role are empty.
type MigrateLockHolder struct {
	PID         int32
	Application string        // application_name ("pcp-migrate" for a migrate run of this build)
	Client      string        // client address, "local" for a Unix socket
	SessionAge  time.Duration // since the holder's session started
}

// MigrateWaiting is told, while a migrate run waits for another's lock,
// who holds it and how long this run has waited: at the first refusal, then
// every MigrateWaitReport.
type MigrateWaiting func(holder MigrateLockHolder, waited time.Duration)

// lockMigrations takes migrateLockKey for conn's session, asking every
// migrateLockPoll until it is free or ctx ends. Two runs at once (two
// pods' init containers, a hook Job beside a manual run) otherwise met in
// tern's own lock, which waits inside a statement: the waiting session
// holds a snapshot, the running one's CREATE INDEX CONCURRENTLY (migration
// 004) waits for every snapshot to go, and PostgreSQL ends the pair as a
// deadlock (40P01), failing one run nearly every time. Between two tries
// the waiting session runs nothing, so the index does not wait for it.
func lockMigrations(ctx context.Context, conn *pgx.Conn, waiting MigrateWaiting) error {
	start := time.Now()
	var reported time.Time
	for {
		var got bool
		var pid uint32
		if err := conn.QueryRow(ctx, "select pg_try_advisory_lock($1), pg_backend_pid()", migrateLockKey).Scan(&got, &pid); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if got {
			return sameSession(ctx, conn, pid)
		}
		if waiting != nil && (reported.IsZero() || time.Since(reported) >= MigrateWaitReport) {
			// A holder gone between the two statements, or one this role
			// may not see, is not reported; the next refusal tries again.
			if h, ok := migrateLockHolder(ctx, conn); ok {
				waiting(h, time.Since(start))
				reported = time.Now()
			}
		}
		if !backoff.Sleep(ctx, migrateLockPoll) {
			return fmt.Errorf("wait for another migrate run to finish: %w", ctx.Err())
		}
	}
}

// PoolerError is a migrate run whose statements reached PostgreSQL
// through a connection pooler in transaction mode (PgBouncer's
// pool_mode=transaction): its session locks, migrateLockKey's and tern's,
// would stay on whichever server connection took them, held for the
// pooler's server_lifetime (an hour by default), and the next run would
// wait for them until its bound.
type PoolerError struct {
	// Backends are two server processes that served the same session.
	Backends [2]uint32
	// Released reports whether the migration lock taken was released;
	// when not, its holder is Backends[0].
	Released bool
}

func (e *PoolerError) Error() string {
	msg := fmt.Sprintf("DATABASE_URL goes through a connection pooler in transaction mode (one session's statements ran on backends %d and %d), "+
		"which would keep the migration's session locks on its server connections: run migrate on a direct connection to PostgreSQL (the chart's database.migrateKey)",
		e.Backends[0], e.Backends[1])
	if !e.Released {
		msg += fmt.Sprintf("; the migration lock stays held by backend %d until the pooler closes that connection (or select pg_terminate_backend(%d))", e.Backends[0], e.Backends[0])
	}
	return msg
}

// poolerChecks is how many statements after the lock's must run on its
// backend, poolerCheckGap apart; poolerUnlockTries how many times a run
// found pooled tries to reach that backend again to release the lock.
// Three checks in a row let half the runs through a PgBouncer pool of four
// server connections, three of them busy, in a review's twelve runs (each
// missed run left the lock on a pooled connection, and the next runs
// waited out their bound for it); spread over a tenth of a second, each
// check lands on whichever connection is free then.
const (
	poolerChecks      = 10
	poolerCheckGap    = 10 * time.Millisecond
	poolerUnlockTries = 50
)

// sameSession checks that conn's statements run on backend pid, which
// took the migration lock: through a pooler in transaction mode they run
// on whichever server connection is free (a review ran two migrate runs
// through PgBouncer: the lock stayed on an idle server connection, and the
// next run waited its 5 minutes for it and failed). A pool that hands a
// quiet client the same connection again passes; one busy with the
// service's clients, where a lock would be stranded, is caught. On a
// pooler it releases the lock if it reaches pid again, and returns a
// *PoolerError.
func sameSession(ctx context.Context, conn *pgx.Conn, pid uint32) error {
	for i := range poolerChecks {
		if i > 0 && !backoff.Sleep(ctx, poolerCheckGap) {
			return fmt.Errorf("take the migration lock: %w", ctx.Err())
		}
		var other uint32
		if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&other); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if other == pid {
			continue
		}
		perr := &PoolerError{Backends: [2]uint32{pid, other}}
		for range poolerUnlockTries {
			// Unlocked only on the backend that holds it: elsewhere
			// pg_advisory_unlock would warn that it holds no such lock.
			err := conn.QueryRow(ctx, "select case when pg_backend_pid() = $2 then pg_advisory_unlock($1) else false end",
				migrateLockKey, int64(pid)).Scan(&perr.Released)
			if err != nil || perr.Released {
				break
			}
		}
		return perr
	}
	return nil
}

// migrateLockHolder finds the session holding migrateLockKey in this
// database: an advisory lock is per database, and on a shared cluster a run
// migrating another database holds the same key without blocking this one.
// pg_locks shows a bigint advisory key as its two 32-bit halves.
func migrateLockHolder(ctx context.Context, conn *pgx.Conn) (MigrateLockHolder, bool) {
	var h MigrateLockHolder
	err := conn.QueryRow(ctx, `
select l.pid, coalesce(a.application_name, ''),
       coalesce(host(a.client_addr), case when a.client_port = -1 then 'local' else '' end),
       coalesce(now() - a.backend_start, '0'::interval)
from pg_locks l left join pg_stat_activity a on a.pid = l.pid
where l.locktype = 'advisory' and l.granted and l.objsubid = 1
  and l.database = (select oid from pg_database where datname = current_database())
  and l.classid = ($1::bigint)::oid and l.objid = ($2::bigint)::oid
limit 1`, migrateLockKey>>32, migrateLockKey&0xffffffff).Scan(&h.PID, &h.Application, &h.Client, &h.SessionAge)
	return h, err == nil
}
