package store

import (
	"context"
	"fmt"
	"time"

	"github.com/pcp/route-processing/pkg/outbox"
)

// tableHealthSQL reads only statistics views and the relation's size: cheap
// enough for the gauges' cadence.
//
// The xmin horizon is held back by any session of this database with a
// backend_xmin (an open snapshot) or a backend_xid (a transaction that has
// written, even one idle in read committed, which holds no snapshot between
// statements: the forgotten psql session of the runbook), its age taken from
// xact_start; by walsenders with one (hot_standby_feedback, or a slot's
// active sender; a physical one has no database), listed undated (below);
// and by prepared transactions of this database (from when they were
// prepared). A walsender's xmin follows the standby's oldest snapshot and
// moves on while its state_change stays at the start of streaming: dated
// from that, a standby's feedback read as a horizon held since streaming
// began; undated, each xmin value is dated from when the caller first saw
// it. One whose xmin is this statement's own holds nothing back: an idle
// standby's, once its feedback (every 10 s by default) has caught up with an
// idle primary, which it would then report unchanged for as long as the
// primary stays idle. Left out: the own backend (this statement has a
// snapshot too) and autovacuum workers, the only ones with an xmin and no
// user, whose xmin vacuum ignores (a long one on a large table would read as
// a held horizon). A replication slot with no active sender pins xmin as
// well, but its xid cannot be dated without track_commit_timestamp, so it is
// not counted here. least() ignores the NULL of a kind that holds nothing.
// Sessions of other roles show their xids but, unless the role has
// pg_read_all_stats, none of their times (nor their backend_type): they are
// listed (pid and xid) for the caller to date.
//
// The live tuples are the estimate [Outbox.Stats] uses, not n_live_tup
// alone: after a statistics reset (crash recovery, a promoted standby) that
// counts only the rows written since, and the alerts that divide by it
// (bloat, bytes per row) fired after every failover. n_live_tup stands in
// only where nothing else knows (a table never vacuumed or analyzed, whose
// counts run from its creation). The dead tuples have no such estimate:
// after a reset they count from it, too few until the next vacuum.
const tableHealthSQL = `
with own as (select backend_xmin from pg_stat_activity where pid = pg_backend_pid()),
holders as (
    select pid, coalesce(backend_xid, backend_xmin) as xid,
           case when backend_type <> 'walsender' then coalesce(xact_start, state_change, backend_start) end as since
    from pg_stat_activity
    where (backend_xmin is not null or backend_xid is not null) and pid <> pg_backend_pid()
      and (datname = current_database() or datname is null) and usesysid is not null
      and not coalesce(backend_type = 'walsender' and backend_xmin = (select backend_xmin from own), false)
)
select
    coalesce(extract(epoch from now() - least(
        (select min(since) from holders),
        (select min(prepared) from pg_prepared_xacts where database = current_database()))), 0)::float8,
    (select coalesce(array_agg(pid::text || ':' || xid::text), '{}') from holders where since is null),
    coalesce((` + estimateRowsSQL + `), s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
    pg_total_relation_size('route_passport_outbox'::regclass)
from (select 1) as one
left join pg_stat_user_tables s on s.relid = 'route_passport_outbox'::regclass`

// TableHealth reads the age of the oldest transaction holding back vacuum
// and the outbox table's tuple counts and size.
func (o *Outbox) TableHealth(ctx context.Context) (outbox.TableHealth, error) {
	var h outbox.TableHealth
	var ageS float64
	if err := o.pool.QueryRow(ctx, tableHealthSQL).Scan(&ageS, &h.UndatedHolders, &h.LiveTuples, &h.DeadTuples, &h.TableBytes); err != nil {
		return h, fmt.Errorf("read outbox table health: %w", err)
	}
	h.OldestXactAge = time.Duration(max(ageS, 0) * float64(time.Second))
	return h, nil
}
