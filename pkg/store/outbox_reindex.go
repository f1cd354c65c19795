package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/outbox"
)

// The reindexer's statements (pkg/relay/reindex.go): the outbox's indexes
// as the catalog sees them, the maintenance lease, and the rebuild.

// Indexes lists the indexes of route_passport_outbox with their size and
// the catalog's count of entries.
func (o *Outbox) Indexes(ctx context.Context) ([]outbox.Index, error) {
	rows, err := o.pool.Query(ctx, `
select c.relname::text, pg_relation_size(c.oid), c.reltuples::float8,
       c.relpages::int8 * current_setting('block_size')::int8, i.indisvalid
from pg_index i join pg_class c on c.oid = i.indexrelid
where i.indrelid = 'route_passport_outbox'::regclass
order by c.relname`)
	if err != nil {
		return nil, fmt.Errorf("list outbox indexes: %w", err)
	}
	ixs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Index, error) {
		var ix outbox.Index
		err := row.Scan(&ix.Name, &ix.Bytes, &ix.Entries, &ix.CountedBytes, &ix.Valid)
		return ix, err
	})
	if err != nil {
		return nil, fmt.Errorf("list outbox indexes: %w", err)
	}
	return ixs, nil
}

// LeaseMaintenance takes the relays' maintenance lease until now()+hold
// when nobody holds it; it reports whether it did. A relay that dies while
// holding it only delays the next pass until the lease ends.
func (o *Outbox) LeaseMaintenance(ctx context.Context, hold time.Duration) (bool, error) {
	tag, err := o.pool.Exec(ctx, `
update outbox_relay_control
set maintenance_until = now() + $1 * interval '1 microsecond'
where id and (maintenance_until is null or maintenance_until <= now())`, hold.Microseconds())
	if err != nil {
		return false, fmt.Errorf("take maintenance lease: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// HoldMaintenance sets the held lease's end to now()+hold: when a pass is
// done, the time until the next.
func (o *Outbox) HoldMaintenance(ctx context.Context, hold time.Duration) error {
	if _, err := o.pool.Exec(ctx, `
update outbox_relay_control set maintenance_until = now() + $1 * interval '1 microsecond' where id`, hold.Microseconds()); err != nil {
		return fmt.Errorf("hold maintenance lease: %w", err)
	}
	return nil
}

// The reindexer's statements, less the index's name. Both wait for every
// transaction that may still use the old index, and for a vacuum's lock on
// the table: stuck leaves them out by this text, since those waits are the
// reindexer's, not a claim's or a mark's.
const (
	reindexSQL   = "reindex index concurrently "
	dropIndexSQL = "drop index concurrently if exists "
)

// RebuildIndex rebuilds one outbox index with REINDEX INDEX CONCURRENTLY:
// writes and claims go on while it builds (it scans the table twice), and
// the rebuilt index holds only live entries. Cancelled half way, it leaves
// an invalid copy (name_ccnew) that DropIndex removes.
func (o *Outbox) RebuildIndex(ctx context.Context, name string) error {
	if _, err := o.pool.Exec(ctx, reindexSQL+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("reindex %s: %w", name, err)
	}
	return nil
}

// DropIndex drops an index without blocking writes.
func (o *Outbox) DropIndex(ctx context.Context, name string) error {
	if _, err := o.pool.Exec(ctx, dropIndexSQL+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop index %s: %w", name, err)
	}
	return nil
}
