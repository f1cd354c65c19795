package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Blocker is a session another one waits for.
type Blocker struct {
	PID         int
	Application string
	// State is pg_stat_activity.state: "active", "idle in transaction", …
	State string
	// XactAge is how long its transaction has been open.
	XactAge time.Duration
}

// ourLockWait is true of a session w of pg_stat_activity that belongs to
// this pool's application in this database and waits for a lock.
const ourLockWait = `w.datname = current_database()
  and w.application_name = current_setting('application_name')
  and w.wait_event_type = 'Lock'`

// Blockers lists the sessions that this pool's application (application_name,
// see [Open]) is waiting for a lock of: what an operator's command tells
// while it waits, so that the wait is not silent.
func (o *Outbox) Blockers(ctx context.Context) ([]Blocker, error) {
	return blockersWhere(ctx, o.pool, ourLockWait)
}

// blockersWhere lists the sessions that the sessions w of pg_stat_activity
// matching where (with args) wait for a lock of.
func blockersWhere(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, where string, args ...any) ([]Blocker, error) {
	rows, err := q.Query(ctx, `
select distinct b.pid, coalesce(b.application_name, ''), coalesce(b.state, ''),
       coalesce(extract(epoch from now() - b.xact_start), 0)::float8
from pg_stat_activity w
join pg_stat_activity b on b.pid = any(pg_blocking_pids(w.pid))
where `+where+`
order by b.pid`, args...)
	if err != nil {
		return nil, fmt.Errorf("look for lock waits: %w", err)
	}
	defer rows.Close()
	var out []Blocker
	for rows.Next() {
		var b Blocker
		var age float64
		if err := rows.Scan(&b.PID, &b.Application, &b.State, &age); err != nil {
			return nil, fmt.Errorf("look for lock waits: %w", err)
		}
		b.XactAge = time.Duration(age * float64(time.Second))
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look for lock waits: %w", err)
	}
	return out, nil
}
