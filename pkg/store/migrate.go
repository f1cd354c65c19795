package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pcp/route-processing/pkg/backoff"
)

// Migration is what a migration run found and left: the schema versions
// before and after. From above To is a database of a later release, left
// as it is.
type Migration struct {
	From, To int32
}

// Newer reports whether the database's schema was a later release's.
func (m Migration) Newer() bool { return m.From > m.To }

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

// MigrateReports are told of a migrate run's waits; nil ones hear nothing.
type MigrateReports struct {
	Waiting  MigrateWaiting  // for another run's migration lock
	Retrying MigrateRetrying // after a table lock's wait ran out
}

func (r *MigrateReports) waiting() MigrateWaiting {
	if r == nil {
		return nil
	}
	return r.Waiting
}

func (r *MigrateReports) retrying() MigrateRetrying {
	if r == nil {
		return nil
	}
	return r.Retrying
}

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

func migrateConn(ctx context.Context, conn *pgx.Conn, reports *MigrateReports) (Migration, error) {
	// Released with the session (the caller closes conn) if not here.
	if err := lockMigrations(ctx, conn, reports.waiting()); err != nil {
		return Migration{}, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "select pg_advisory_unlock($1)", migrateLockKey) }()
	// Under a lock_timeout the URL sets, tern's version table and its own
	// advisory lock (a run of a release before migrateLockKey may hold it)
	// are retried too; their blockers go unnamed, the second session being
	// opened only for migrations.
	var m *migrate.Migrator
	err := retryLockTimeouts(ctx, lockWaitWatch{}, reports.retrying(), func() (err error) {
		m, err = migrate.NewMigrator(ctx, conn, VersionTable)
		return err
	})
	if err != nil {
		return Migration{}, fmt.Errorf("create migrator: %w", err)
	}
	sub, err := migrations()
	if err != nil {
		return Migration{}, err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return Migration{}, fmt.Errorf("load migrations: %w", err)
	}
	from, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return Migration{}, fmt.Errorf("read the schema version: %w", err)
	}
	latest := int32(len(m.Migrations))
	if from > latest {
		// A rollback to this release (helm rollback, a GitOps revert) runs
		// its migration hook on the later release's schema, which keeps
		// this release's tables (migrations stay backward compatible):
		// tern would refuse ("outside the valid versions") and fail the
		// rollback.
		return Migration{From: from, To: latest}, nil
	}
	if from == latest {
		return Migration{From: from, To: latest}, nil // nothing to apply, no second session
	}
	// The bound is set in each migration's transaction (tern calls OnStart
	// after its BEGIN), not for the session: PgBouncer refuses a
	// lock_timeout among the startup parameters ("unsupported startup
	// parameter"), and through a transaction pooler a session SET would
	// stay on a server connection the service's statements use next. A
	// migration outside a transaction (tern's disable-tx: 004's CREATE
	// INDEX CONCURRENTLY) takes no lock that the service's statements queue
	// behind, and waits for every older transaction to end, a report's or
	// pg_dump's too: under a lock_timeout (the URL's, the role's) it would
	// fail at every long reader and build its index again at every try, so
	// it runs without one (tern's "reset all" after it restores the
	// session's default). Only a broken connection fails these SETs; the
	// migration's first statement then fails and says so.
	//
	// No statement_timeout either, unless the URL sets one: a role's (the
	// README suggests one just above INGEST_DB_TIMEOUT for the service)
	// would cancel 004's index build, or its wait for older snapshots, at
	// every try (57014, not retried); the run's own bound ends it.
	params := conn.Config().RuntimeParams
	urlLockBound, urlStatementBound := setsSetting(params, "lock_timeout"), setsSetting(params, "statement_timeout")
	m.OnStart = func(int32, string, string, string) {
		if conn.PgConn().TxStatus() == 'I' {
			_, _ = conn.Exec(ctx, "set lock_timeout = 0")
			if !urlStatementBound {
				_, _ = conn.Exec(ctx, "set statement_timeout = 0")
			}
			return
		}
		if !urlLockBound {
			_, _ = conn.Exec(ctx, fmt.Sprintf("set local lock_timeout = '%dms'", migrateLockTimeout.Milliseconds()))
		}
		if !urlStatementBound {
			_, _ = conn.Exec(ctx, "set local statement_timeout = 0")
		}
	}
	watch := lockWaitWatch{pid: conn.PgConn().PID()}
	if side, err := pgx.ConnectConfig(ctx, conn.Config()); err == nil {
		defer side.Close(context.WithoutCancel(ctx))
		watch.side = side
	} // else (max_connections reached, say) retries are reported without their blockers
	// Each migration commits with its version, and 004 is re-runnable (a
	// failed build is dropped first): a try resumes where the last stopped.
	if err := retryLockTimeouts(ctx, watch, reports.retrying(), func() error { return m.Migrate(ctx) }); err != nil {
		return Migration{}, fmt.Errorf("apply migrations: %w", err)
	}
	return Migration{From: from, To: latest}, nil
}

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

// setsSetting reports whether a connection's startup parameters
// (RuntimeParams: DATABASE_URL's query or key=value settings, PGOPTIONS)
// set the setting named, as a parameter of its own (?lock_timeout=10s) or
// in options (-c lock_timeout=10s, --lock-timeout=10s). Setting names are
// case-insensitive, and PostgreSQL reads a dash in an option's name as an
// underscore.
func setsSetting(params map[string]string, setting string) bool {
	isSetting := func(s string) bool {
		name, _, _ := strings.Cut(s, "=")
		return strings.EqualFold(strings.ReplaceAll(name, "-", "_"), setting)
	}
	for k, v := range params {
		if isSetting(k) {
			return true
		}
		if k != "options" {
			continue
		}
		fields := strings.Fields(v)
		for i, f := range fields {
			switch {
			case f == "-c" && i+1 < len(fields):
				f = fields[i+1]
			case strings.HasPrefix(f, "--"), strings.HasPrefix(f, "-c"):
				f = f[2:]
			default:
				continue
			}
			if isSetting(f) {
				return true
			}
		}
	}
	return false
}

// migrateConnConfig is the configuration of a migrate run's connection to
// databaseURL: its application_name unless databaseURL sets one.
func migrateConnConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := connConfig(databaseURL, "DATABASE_URL")
	if err != nil {
		return nil, err
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = MigrateApplication
	}
	return cfg, nil
}

// MigrateApplication is the application_name of a migrate run's
// connection unless databaseURL sets one: what another run waiting for its
// lock reports (MigrateLockHolder).
const MigrateApplication = "pcp-migrate"

// MigrateURL connects to databaseURL and applies every embedded migration
// that the database lacks. It is idempotent, and safe to run from several
// processes at once: they take turns on a session advisory lock
// (lockMigrations), and reports.Waiting, if set, hears of the wait. A
// migration waits at most migrateLockTimeout for a table lock (or the
// lock_timeout databaseURL sets), then is tried again after a backoff
// until ctx ends, reports.Retrying hearing of each try that gave up. A
// second connection, while migrations run, names the sessions they wait
// for.
func MigrateURL(ctx context.Context, databaseURL string, reports *MigrateReports) (Migration, error) {
	cfg, err := migrateConnConfig(databaseURL)
	if err != nil {
		return Migration{}, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return Migration{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrateConn(ctx, conn, reports)
}
