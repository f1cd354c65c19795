package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Stuck returns an error when this application's sessions (by
// application_name, see [Open]) wait for a lock nobody is working to
// release: a table lock (a migration, an operator's LOCK TABLE, VACUUM
// FULL), or a row lock held by a session idle in its transaction (a
// forgotten psql). Such a call waits until a human acts. A wait behind a
// running statement (the relay marking outbox rows the ingestor upserts) is
// contention, and a wait behind a session of the same application (a
// pipelined batch of the same routes) is the ordering the caller asks for:
// neither counts, nor do the waits of the relay's reindexer (RebuildIndex,
// DropIndex), which are no caller's: they made every relay not ready while a
// reindex waited for an idle transaction. Callers run it once a call has
// been outstanding for a while, so that a slow database is not taken for a
// stuck one, or as their probe while the database is down (one round trip
// either way).
func (s *Passports) Stuck(ctx context.Context) error { return stuck(ctx, s.pool) }

// Stuck is [Passports.Stuck] for the relay's sessions.
func (o *Outbox) Stuck(ctx context.Context) error { return stuck(ctx, o.pool) }

func stuck(ctx context.Context, pool *pgxpool.Pool) error {
	var n int
	// The simple protocol: one round trip even on a new connection, where
	// the cached-statement mode would prepare first (a probe on a link
	// 700 ms slow per reply then ran out of its wait).
	if err := pool.QueryRow(ctx, stuckSQL, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		return fmt.Errorf("look for stuck calls: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%d call(s) wait for a table lock or for a transaction left idle, held by another application's session", n)
	}
	return nil
}

const stuckSQL = `
select count(*)::int from pg_stat_activity w
where ` + ourLockWait + `
  and w.query not like '` + reindexSQL + `%' and w.query not like '` + dropIndexSQL + `%'
  and exists (
    select 1 from pg_stat_activity b
    where b.pid = any(pg_blocking_pids(w.pid))
      and b.application_name is distinct from w.application_name
      and (w.wait_event = 'relation' or b.state like 'idle in transaction%'))`
