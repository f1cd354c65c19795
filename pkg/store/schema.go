package store

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/pcp/route-processing/db"
	"github.com/pcp/route-processing/pkg/sqlstate"
)

// SchemaError says that the database's schema is older than this build's:
// the migrations were not run (`ingestor migrate`, the chart's Job).
type SchemaError struct {
	Have, Want int
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("database schema is at version %d, this build needs %d: run `ingestor migrate` (the chart's migration Job does)", e.Have, e.Want)
}

// SchemaVersion is the schema version `ingestor migrate` brings a database
// to: the number of migrations this build carries, found as tern finds
// them.
func SchemaVersion() (int, error) {
	sub, err := migrations()
	if err != nil {
		return 0, err
	}
	paths, err := migrate.FindMigrations(sub)
	if err != nil {
		return 0, fmt.Errorf("find migrations: %w", err)
	}
	return len(paths), nil
}

// checkSchema returns a *SchemaError when the database's schema is older
// than SchemaVersion (a newer one is a later release's, which keeps this
// one's tables: migrations stay backward compatible). A role that may not
// read the version table (SQLSTATE 42501: the migrations ran as another
// owner) cannot tell; that is not held against it: the writes will say.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	want, err := SchemaVersion()
	if err != nil {
		return err
	}
	var have int
	// The simple protocol: one round trip on a new connection (see stuck).
	err = pool.QueryRow(ctx, `select coalesce(max(version), 0) from `+VersionTable, pgx.QueryExecModeSimpleProtocol).Scan(&have)
	switch {
	case sqlState(err) == sqlstate.UndefinedTable: // never migrated
		have = 0
	case sqlState(err) == "42501": // insufficient_privilege
		return nil
	case err != nil:
		return fmt.Errorf("read the schema version: %w", err)
	}
	if have < want {
		return &SchemaError{Have: have, Want: want}
	}
	return nil
}

// CheckSchema fails with a *SchemaError when the database's schema is
// older than this build's.
func (s *Passports) CheckSchema(ctx context.Context) error { return checkSchema(ctx, s.pool) }

// CheckSchema is [Passports.CheckSchema] for the relay's commands.
func (o *Outbox) CheckSchema(ctx context.Context) error { return checkSchema(ctx, o.pool) }

// SchemaMissing reports whether err is a statement that named a table or
// column the database does not have ([sqlstate.SchemaMissing]).
func SchemaMissing(err error) bool {
	return sqlstate.SchemaMissing(sqlState(err))
}

// migrations is the embedded migrations directory, as tern reads it.
func migrations() (fs.FS, error) {
	sub, err := fs.Sub(db.Migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("open migrations: %w", err)
	}
	return sub, nil
}
