package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// MigrateLockKey is the advisory lock migrate runs take turns on.
const MigrateLockKey = migrateLockKey

// MigrateLockTimeout is a migration's lock_timeout unless its URL sets one.
const MigrateLockTimeout = migrateLockTimeout

// MigrateBoundsLockWaits reports whether a migrate run connected with cfg
// sets its own lock_timeout in each migration (the URL sets none).
func MigrateBoundsLockWaits(cfg *pgx.ConnConfig) bool {
	return !setsSetting(cfg.RuntimeParams, "lock_timeout")
}

// Migrate applies every embedded migration that the database lacks, on
// conn: MigrateURL's work on a connection a test already holds.
func Migrate(ctx context.Context, conn *pgx.Conn) error {
	_, err := migrateConn(ctx, conn, nil)
	return err
}

// MigrateTo brings the database of conn to schema version (a release
// behind this build's), as tern does, without migrate runs' lock.
func MigrateTo(ctx context.Context, conn *pgx.Conn, version int32) error {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return fmt.Errorf("create migrator: %w", err)
	}
	sub, err := migrations()
	if err != nil {
		return err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := m.MigrateTo(ctx, version); err != nil {
		return fmt.Errorf("migrate to version %d: %w", version, err)
	}
	return nil
}

// MigrateConnConfig is a migrate run's connection configuration.
func MigrateConnConfig(databaseURL string) (*pgx.ConnConfig, error) {
	return migrateConnConfig(databaseURL)
}

// FindMigrateLockHolder is the query a waiting migrate run reports from.
func FindMigrateLockHolder(ctx context.Context, conn *pgx.Conn) (MigrateLockHolder, bool) {
	return migrateLockHolder(ctx, conn)
}
