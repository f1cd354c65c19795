// Package sqlstate holds the readings of PostgreSQL's error codes that more
// than one package branches on. It links no database driver, so that
// packages which only read a code (through the SQLState method pgconn's
// errors have) need not link pgx.
package sqlstate

// Codes of PostgreSQL's Appendix A that a caller branches on.
const (
	UndefinedTable  = "42P01"
	UndefinedColumn = "42703"
)

// SchemaMissing reports whether code says a statement named a table or a
// column the database does not have: a database never migrated, or one a
// release behind this build.
func SchemaMissing(code string) bool {
	return code == UndefinedTable || code == UndefinedColumn
}
