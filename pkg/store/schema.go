package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/db"
)

// SchemaError says that the database's schema is older than this build's:
// the migrations were not run (`ingestor migrate`, the chart's Job).
type SchemaError struct {
	Have, Want int
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("database schema is at version %d, this build needs %d: run `ingestor migrate` (the chart's migration Job does)", e.Have, e.Want)
}

// SchemaVersion is the number of migrations this build carries: the schema
// version `ingestor migrate` brings a database to.
func SchemaVersion() int {
	entries, err := fs.ReadDir(db.Migrations, "migrations")
	if err != nil {
		panic(fmt.Sprintf("embedded migrations: %v", err)) // built into the binary
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			n++
		}
	}
	return n
}

// checkSchema returns a *SchemaError when the database's schema is older
// than SchemaVersion (a newer one is a later release's, which keeps this
// one's tables: migrations stay backward compatible).
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var have int
	err := pool.QueryRow(ctx, `select coalesce(max(version), 0) from `+VersionTable).Scan(&have)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		have, err = 0, nil
	}
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if want := SchemaVersion(); have < want {
		return &SchemaError{Have: have, Want: want}
	}
	return nil
}

// CheckSchema fails with a *SchemaError when the database's schema is
// older than this build's.
func (s *Passports) CheckSchema(ctx context.Context) error { return checkSchema(ctx, s.pool) }
