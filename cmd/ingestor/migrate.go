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
	logger := obs.NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := store.MigrateURL(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	logger.Info("migrate: database is at the latest schema", "took", time.Since(start).Round(time.Millisecond))
	return nil
}
