package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/store"
)

func runMigrate(ctx context.Context, environ []string, stderr io.Writer) error {
	cfg, err := config.LoadMigrate(environ)
	if err != nil {
		return err
	}
	logger := obs.NewLogger(stderr, cfg.LogFormat, cfg.LogLevel, cfg.LogForceColor)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	m, err := store.MigrateURL(ctx, cfg.DatabaseURL, &store.MigrateReports{
		Waiting: migrateWaiting(logger), Retrying: migrateRetrying(logger)})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	took := time.Since(start).Round(time.Millisecond)
	if m.Newer() {
		logger.Warn("migrate: the database schema is a later release's; left as it is (migrations stay backward compatible)",
			"schema_version", m.From, "this_build", m.To, "took", took)
		return nil
	}
	logger.Info("migrate: database is at the latest schema", "from_version", m.From, "to_version", m.To, "took", took)
	return nil
}

// migrateWaiting logs a wait for another migrate run's lock, naming the
// session that holds it: without it a run waiting behind a stuck holder said
// nothing until its 5-minute bound. A wait of seconds (another pod's run
// finishing) is routine; reports after the first are warnings.
func migrateWaiting(logger *slog.Logger) store.MigrateWaiting {
	return func(h store.MigrateLockHolder, waited time.Duration) {
		level := slog.LevelInfo
		if waited >= store.MigrateWaitReport {
			level = slog.LevelWarn
		}
		logger.Log(context.Background(), level, "migrate: waiting for the migration lock, held by another session (a migrate run elsewhere; if it is stuck, end it with pg_terminate_backend(holder_pid))",
			"holder_pid", h.PID, "holder_application", h.Application, "holder_client", h.Client,
			"holder_session_age", h.SessionAge.Round(time.Second), "waited", waited.Round(time.Second))
	}
}

// migrateRetrying warns of a migration that gave up waiting for a table lock
// (lock_timeout) and will be tried again, naming the sessions it waited for:
// a long transaction (pg_dump, a report, a session idle in its transaction)
// that holds it off until the run's 5-minute bound is the operator's to end
// or wait out.
func migrateRetrying(logger *slog.Logger) store.MigrateRetrying {
	return func(r store.MigrateRetry) {
		blockers := make([]string, 0, len(r.Blockers))
		for _, b := range r.Blockers {
			blockers = append(blockers, fmt.Sprintf("pid %d (%q, %s, transaction open %s)",
				b.PID, b.Application, b.State, b.XactAge.Round(time.Second)))
		}
		if len(blockers) == 0 {
			blockers = append(blockers, "not seen (the wait was not sampled)")
		}
		migration := r.Migration
		if migration == "" {
			migration = "(the migrator's lock)"
		}
		logger.Warn("migrate: a migration gave up waiting for a table lock (lock_timeout), so that the service's statements do not queue behind it; retrying",
			"migration", migration, "tries", r.Tries, "retry_in", r.Next.Round(time.Millisecond),
			"blocked_by", strings.Join(blockers, "; "))
	}
}
