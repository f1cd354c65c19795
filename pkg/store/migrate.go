package store

import (
	"context"
	"fmt"
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
		if err := conn.QueryRow(ctx, "select pg_try_advisory_lock($1)", migrateLockKey).Scan(&got); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if got {
			return nil
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

func migrateConn(ctx context.Context, conn *pgx.Conn, waiting MigrateWaiting) (Migration, error) {
	// Released with the session (the caller closes conn) if not here.
	if err := lockMigrations(ctx, conn, waiting); err != nil {
		return Migration{}, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "select pg_advisory_unlock($1)", migrateLockKey) }()
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
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
	if err := m.Migrate(ctx); err != nil {
		return Migration{}, fmt.Errorf("apply migrations: %w", err)
	}
	return Migration{From: from, To: latest}, nil
}

// MigrateApplication is the application_name of a migrate run's
// connection unless databaseURL sets one: what another run waiting for its
// lock reports (MigrateLockHolder).
const MigrateApplication = "pcp-migrate"

// MigrateURL opens a single connection to databaseURL and applies every
// embedded migration that the database lacks. It is idempotent, and safe to
// run from several processes at once: they take turns on a session advisory
// lock (lockMigrations), and waiting, if not nil, hears of the wait.
func MigrateURL(ctx context.Context, databaseURL string, waiting MigrateWaiting) (Migration, error) {
	cfg, err := connConfig(databaseURL, "DATABASE_URL")
	if err != nil {
		return Migration{}, err
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = MigrateApplication
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return Migration{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrateConn(ctx, conn, waiting)
}
