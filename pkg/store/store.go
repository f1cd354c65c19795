// Package store is the service's only door to PostgreSQL: the connection pool,
// the embedded tern migrations, the ingest write (passport upsert plus its two
// outbox rows in one transaction) and the outbox queries of the relay.
//
// Callers branch on errors through [Classify], which tells a database that is
// unavailable as a whole (pause and retry) from one that rejects a single
// record (dead-letter it).
package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pcp/route-processing/db"
)

// VersionTable is tern's bookkeeping table.
const VersionTable = "schema_version"

// NotifyChannel is the LISTEN/NOTIFY channel on which the ingestor tells the
// relays that new outbox rows are waiting.
const NotifyChannel = "route_passport_outbox"

// DefaultConnectTimeout bounds a connection attempt of [Open]'s pool when
// the URL sets no connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// Open connects a pool and checks that the server answers. The URL may carry
// pgxpool settings such as pool_max_conns, and connect_timeout (default
// [DefaultConnectTimeout]).
func Open(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx echoes the whole connection string (password included) in some
		// parse errors, so say only what is safe.
		return nil, errors.New("parse DATABASE_URL: invalid connection string")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// Without connect_timeout (URL or PGCONNECT_TIMEOUT) a connection
		// attempt to a host that drops packets hangs for the kernel's TCP
		// timeout, minutes.
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	return pool, nil
}

// Migrate applies every embedded migration that the database lacks. It is
// idempotent, and safe to run from several processes at once (tern takes an
// advisory lock).
func Migrate(ctx context.Context, conn *pgx.Conn) error {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return fmt.Errorf("create migrator: %w", err)
	}
	sub, err := fs.Sub(db.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("open migrations: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// MigrateURL opens a single connection to databaseURL and migrates it.
func MigrateURL(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return errors.New("parse DATABASE_URL: invalid connection string")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return Migrate(ctx, conn)
}
