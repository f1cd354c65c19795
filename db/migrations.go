// Package db holds the SQL migrations of the service, embedded so that the
// binaries carry their own schema (`ingestor migrate`).
package db

import "embed"

// Migrations are tern migration files, applied in numeric order.
//
//go:embed migrations/*.sql
var Migrations embed.FS
