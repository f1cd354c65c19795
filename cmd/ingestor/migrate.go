package main

import (
	"context"
	"fmt"
	"io"
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
	m, err := store.MigrateURL(ctx, cfg.DatabaseURL)
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
