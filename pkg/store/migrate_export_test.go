package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// MigrateLockKey is the advisory lock migrate runs take turns on.
const MigrateLockKey = migrateLockKey

// Migrate applies every embedded migration that the database lacks, on
// conn: MigrateURL's work on a connection a test already holds.
func Migrate(ctx context.Context, conn *pgx.Conn) error {
	_, err := migrateConn(ctx, conn, nil)
	return err
}

// FindMigrateLockHolder is the query a waiting migrate run reports from.
func FindMigrateLockHolder(ctx context.Context, conn *pgx.Conn) (MigrateLockHolder, bool) {
	return migrateLockHolder(ctx, conn)
}
