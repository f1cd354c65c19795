package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
	m, err := store.MigrateURL(ctx, cfg.DatabaseURL, migrateWaiting(logger))
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
