package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// Migration is what a migration run found and left: the schema versions
// before and after. From above To is a database of a later release, left
// as it is.
type Migration struct {
	From, To int32
}

// Newer reports whether the database's schema was a later release's.
func (m Migration) Newer() bool { return m.From > m.To }

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
