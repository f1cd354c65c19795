package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/outbox"
)

// The operator's and the gauges' queries on route_passport_outbox: pause
// flag, pending summary, retention, `outbox-relay stats` and `requeue`.

// Control reads the pause flag that every relay honours.
func (o *Outbox) Control(ctx context.Context) (outbox.Control, error) {
	var c outbox.Control
	var reason, by *string
	err := o.pool.QueryRow(ctx, `select paused, reason, updated_by, updated_at from outbox_relay_control where id`).
		Scan(&c.Paused, &reason, &by, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return outbox.Control{}, nil
	}
	if err != nil {
		return outbox.Control{}, fmt.Errorf("read outbox_relay_control: %w", err)
	}
	if reason != nil {
		c.Reason = *reason
	}
	if by != nil {
		c.UpdatedBy = *by
	}
	return c, nil
}

// SetPaused sets the pause flag (upserting the single row). Resuming clears
// the reason; pausing again without one keeps it. It notifies the relays so
// that a resume takes effect at once.
func (o *Outbox) SetPaused(ctx context.Context, paused bool, reason, by string) error {
	var r *string
	if paused && reason != "" {
		r = &reason
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
insert into outbox_relay_control (id, paused, reason, updated_by, updated_at)
values (true, $1, $2, $3, now())
on conflict (id) do update set paused = $1,
	-- a second pause without a reason keeps the first one's
	reason = case when $1 and $2::text is null and outbox_relay_control.paused then outbox_relay_control.reason else $2 end,
	updated_by = $3, updated_at = now()`, paused, r, by)
		if err != nil {
			return fmt.Errorf("upsert outbox_relay_control: %w", err)
		}
		return notify(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("set the relays' pause flag: %w", err)
	}
	return nil
}

// Pending counts PENDING rows and the age of the oldest, and FAILED rows;
// each reads only its partial index (PENDING, FAILED: migration 002).
func (o *Outbox) Pending(ctx context.Context) (outbox.PendingSummary, error) {
	var s outbox.PendingSummary
	var ageUS *int64
	err := o.pool.QueryRow(ctx, `
select count(*), (extract(epoch from now() - min(created_at)) * 1e6)::bigint,
    (select count(*) from route_passport_outbox where status = 'FAILED')
from route_passport_outbox where status = 'PENDING'`).Scan(&s.Pending, &ageUS, &s.Failed)
	if err != nil {
		return s, fmt.Errorf("count pending outbox rows: %w", err)
	}
	if ageUS != nil && *ageUS > 0 {
		s.OldestAge = time.Duration(*ageUS) * time.Microsecond
	}
	return s, nil
}

// deletePublishedSQL finds its rows through the PUBLISHED partial index on
// published_at (migration 004), oldest first and from $3 on, so that a
// statement reads only the index range it deletes instead of the whole
// heap, or every entry that a held snapshot keeps from vacuum (see
// DeletePublished). SKIP LOCKED: relays sweeping at the same moment split
// the rows instead of queueing on each other's locks.
const deletePublishedSQL = `
with deleted as (
    delete from route_passport_outbox
    where ctid = any (array(
        select ctid from route_passport_outbox
        where status = 'PUBLISHED' and published_at >= $3
          and published_at < now() - $1 * interval '1 microsecond'
        order by published_at
        limit $2
        for update skip locked))
    returning published_at)
select count(*), coalesce(max(published_at), $3) from deleted`

// DeletePublished deletes up to limit PUBLISHED rows published from from
// (the zero time: from the oldest) to now − olderThan, oldest first, and
// returns how many it deleted and the latest published_at among them (from
// when none). FAILED rows are kept. Rows another sweep is deleting are
// skipped, not waited for.
//
// A sweep passes the last statement's latest published_at (less a margin)
// as the next one's from: the rows deleted since a held snapshot began stay
// in the index until vacuum may remove them, and a scan from the oldest
// entry visits each of them (and its heap tuple) again in every statement.
func (o *Outbox) DeletePublished(ctx context.Context, olderThan time.Duration, limit int, from time.Time) (n int64, last time.Time, err error) {
	if err := o.pool.QueryRow(ctx, deletePublishedSQL, olderThan.Microseconds(), limit, from).Scan(&n, &last); err != nil {
		return 0, time.Time{}, fmt.Errorf("delete published outbox rows: %w", err)
	}
	return n, last, nil
}

// Stats is the answer of `outbox-relay stats`.
type Stats struct {
	// Counts are rows per status. PENDING and FAILED are exact (read from
	// their partial indexes); PUBLISHED is an estimate unless PublishedExact.
	Counts map[string]int64 `json:"counts"`
	// PublishedExact: Counts["PUBLISHED"] was counted, not estimated.
	PublishedExact bool `json:"publishedExact"`
	// OldestPendingAgeSeconds is 0 when nothing is pending.
	OldestPendingAgeSeconds float64        `json:"oldestPendingAgeSeconds"`
	Failures                []FailureGroup `json:"failures"`
	Paused                  bool           `json:"paused"`
	PauseReason             string         `json:"pauseReason,omitempty"`
	// PausedBy and PausedAt say who paused (or last paused again) and when;
	// set only while paused.
	PausedBy string     `json:"pausedBy,omitempty"`
	PausedAt *time.Time `json:"pausedAt,omitempty"`
}

// FailureGroup counts FAILED rows with the same last_error.
type FailureGroup struct {
	LastError string `json:"lastError"`
	Count     int64  `json:"count"`
}

// estimateRowsSQL estimates the table's rows: the statistics system's live
// tuples (n_live_tup: set by each vacuum or analyze, then kept current by
// every insert and delete) when a vacuum or analyze has set it since the
// statistics were last reset (a reset, crash recovery or a promoted standby
// starts it from 0, and then it counts only the rows written since: 20 of
// 4,020); else the planner's estimate, reltuples (kept by autovacuum and
// ANALYZE) scaled to the table's current size. reltuples alone lags: after
// retention deleted 200,000 rows and 50,000 were published, it said 5.
// NULL when neither knows (never vacuumed or analyzed).
const estimateRowsSQL = `
select case
    when coalesce(s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze) is not null then s.n_live_tup
    when c.reltuples < 0 then null
    when c.relpages = 0 then c.reltuples::bigint
    else (c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::bigint))::bigint
end
from pg_class c left join pg_stat_user_tables s on s.relid = c.oid
where c.oid = 'route_passport_outbox'::regclass`

// Stats reads rows per status, the oldest pending age, FAILED rows grouped
// by last_error (most frequent first, up to 50 groups) and the pause flag.
// PENDING and FAILED rows are counted through their partial indexes; the
// PUBLISHED rows, nearly all of a large table, are estimated from the
// table's statistics unless exact is set (then the whole table is counted,
// which takes seconds at tens of millions of rows). A table never analyzed
// is counted exactly.
func (o *Outbox) Stats(ctx context.Context, exact bool) (Stats, error) {
	s := Stats{Counts: map[string]int64{outbox.StatusPending: 0, outbox.StatusPublished: 0, outbox.StatusFailed: 0}}
	p, err := o.Pending(ctx)
	if err != nil {
		return s, err
	}
	s.Counts[outbox.StatusPending] = p.Pending
	s.OldestPendingAgeSeconds = p.OldestAge.Seconds()
	failed := p.Failed
	s.Counts[outbox.StatusFailed] = failed
	var estimate *int64
	if !exact {
		if err := o.pool.QueryRow(ctx, estimateRowsSQL).Scan(&estimate); err != nil {
			return s, fmt.Errorf("estimate outbox rows: %w", err)
		}
	}
	if estimate != nil {
		s.Counts[outbox.StatusPublished] = max(0, *estimate-p.Pending-failed)
	} else {
		var n int64
		if err := o.pool.QueryRow(ctx, `select count(*) from route_passport_outbox where status = 'PUBLISHED'`).Scan(&n); err != nil {
			return s, fmt.Errorf("count published outbox rows: %w", err)
		}
		s.Counts[outbox.StatusPublished] = n
		s.PublishedExact = true
	}
	rows, err := o.pool.Query(ctx, `
select coalesce(last_error, ''), count(*) from route_passport_outbox
where status = 'FAILED' group by 1 order by 2 desc, 1 limit 50`)
	if err != nil {
		return s, fmt.Errorf("group failed outbox rows: %w", err)
	}
	s.Failures, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailureGroup, error) {
		var g FailureGroup
		err := row.Scan(&g.LastError, &g.Count)
		return g, err
	})
	if err != nil {
		return s, fmt.Errorf("group failed outbox rows: %w", err)
	}
	if s.Failures == nil {
		s.Failures = []FailureGroup{}
	}
	c, err := o.Control(ctx)
	if err != nil {
		return s, err
	}
	s.Paused, s.PauseReason = c.Paused, c.Reason
	if c.Paused {
		at := c.UpdatedAt.UTC()
		s.PausedBy, s.PausedAt = c.UpdatedBy, &at
	}
	return s, nil
}

// RequeueFilter selects the rows `outbox-relay requeue` puts back: exactly
// one of its fields is set.
type RequeueFilter struct {
	Failed  bool
	ID      *uuid.UUID
	RouteID *uuid.UUID
}

// RequeueResult is what a Requeue did.
type RequeueResult struct {
	// Requeued rows are PENDING, due now, with attempts 0.
	Requeued int64
	// InFlight rows matched but were left alone: PENDING under a live
	// lease, i.e. a relay is publishing them now (they will be PUBLISHED or
	// rescheduled by it).
	InFlight int64
}

// ErrNoMatch: a requeue by id or route id matched no row.
var ErrNoMatch = errors.New("no outbox row matches")

// Requeue puts the selected rows back to PENDING with attempts reset, due now
// and with no lease, and notifies the relays. --failed takes FAILED rows;
// --id and --route-id take rows in any status (republishing a PUBLISHED row
// on purpose is an operator's right), except PENDING rows under a live lease:
// clearing that lease would let a second relay publish the row while its
// holder still is. A requeue by ID or RouteID that matches no row at all
// returns an error wrapping ErrNoMatch. A requeue that loses a race (a
// deadlock with another requeue or a relay's mark of the same rows) is run
// again (retryConflicts), as the relay's own statements are: it failed the
// operator's command with the raw 40P01 in 5 of 35 runs of two requeues
// beside three relays.
func (o *Outbox) Requeue(ctx context.Context, f RequeueFilter) (RequeueResult, error) {
	var where, what string
	var args []any
	switch {
	case f.Failed:
		where = `status = 'FAILED'`
	case f.ID != nil:
		where, args, what = `id = $1::uuid`, []any{uuidParam(*f.ID)}, "id "+f.ID.String()
	case f.RouteID != nil:
		where, args, what = `route_id = $1::uuid`, []any{uuidParam(*f.RouteID)}, "route id "+f.RouteID.String()
	default:
		return RequeueResult{}, errors.New("requeue: no rows selected")
	}
	const inFlight = `(status = 'PENDING' and coalesce(locked_until > now(), false))`
	var res RequeueResult
	err := retryConflicts(ctx, func() error {
		return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
update route_passport_outbox
set status = 'PENDING', attempts = 0, next_attempt_at = now(), locked_until = null,
    lock_token = null, published_at = null, updated_at = now()
where `+where+` and not `+inFlight, args...)
			if err != nil {
				return fmt.Errorf("update outbox rows: %w", err)
			}
			res.Requeued = tag.RowsAffected()
			if !f.Failed { // FAILED rows are never leased
				if err := tx.QueryRow(ctx, `select count(*) from route_passport_outbox where `+where+` and `+inFlight, args...).
					Scan(&res.InFlight); err != nil {
					return fmt.Errorf("count leased outbox rows: %w", err)
				}
			}
			if res.Requeued > 0 {
				return notify(ctx, tx)
			}
			return nil
		})
	})
	if err != nil {
		return RequeueResult{}, fmt.Errorf("requeue: %w", err)
	}
	if what != "" && res.Requeued == 0 && res.InFlight == 0 {
		return res, fmt.Errorf("requeue: %w %s", ErrNoMatch, what)
	}
	return res, nil
}
