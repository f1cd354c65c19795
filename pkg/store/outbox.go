package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
)

// Outbox statuses (contract §3).
const (
	StatusPending   = "PENDING"
	StatusPublished = "PUBLISHED"
	StatusFailed    = "FAILED"
)

// Outbox runs the relay's queries on route_passport_outbox and the operator
// queries behind `outbox-relay stats|requeue|pause|resume`.
//
// # Why the queries look the way they do
//
// The claim changes only locked_until and lock_token, which no index covers,
// so on a page with room (the table has fillfactor 70) it is a HOT update that
// rewrites no index entry. It deliberately leaves updated_at alone: that
// column is in the FAILED partial index, and touching it would make every
// claim rewrite every index of the row. The one non-HOT update per event is
// the mark that moves the row out of PENDING.
//
// Every change after the claim names the lease token it was claimed with, so
// a relay whose lease expired (and whose rows another relay took over) changes
// nothing.
type Outbox struct {
	pool *pgxpool.Pool
}

// NewOutbox returns the outbox queries on pool.
func NewOutbox(pool *pgxpool.Pool) *Outbox { return &Outbox{pool: pool} }

// OutboxRow is a claimed row: what the relay needs to publish it and to
// decide what happens to it afterwards.
type OutboxRow struct {
	ID        uuid.UUID
	RouteID   uuid.UUID
	EventType string
	Topic     string
	Key       string
	// Payload is the frozen event document, JSON text.
	Payload []byte
	// Headers are the record headers (type, eventId, traceId, correlationId,
	// traceparent: those present).
	Headers map[string]string
	// HeadersError is set when the stored headers are not a JSON object of
	// strings; Headers is then nil. The row is still claimed (its neighbours
	// must not suffer for it): the relay records the error against it.
	HeadersError string
	Attempts     int
	CreatedAt    time.Time
	// Token is the lease token of this claim.
	Token uuid.UUID
}

// Lease names one claimed row and the token it was claimed with.
type Lease struct {
	ID    uuid.UUID
	Token uuid.UUID
}

// Retry is a failed publish to record: the row's attempts grow by one; it
// becomes FAILED when they reach maxAttempts, otherwise it is due again after
// Delay.
type Retry struct {
	ID    uuid.UUID
	Token uuid.UUID
	Error string
	Delay time.Duration
}

// RetryResult is the state a Retry left a row in.
type RetryResult struct {
	ID            uuid.UUID
	Status        string
	Attempts      int
	NextAttemptAt time.Time
}

// ClaimLimits bounds one claim.
type ClaimLimits struct {
	// Rows is the most rows claimed.
	Rows int
	// Bytes bounds the sum of the claimed payloads' stored sizes
	// (pg_column_size: after TOAST compression, so the text the relay holds
	// may be a few times larger). The first row is always claimed, whatever
	// its size, so that no row can block the outbox. 0 means no bound.
	Bytes int64
}

// Claimed is the answer of a claim.
type Claimed struct {
	Rows []OutboxRow
	// More: due rows were left unclaimed because of the byte bound; claim
	// again at once.
	More bool
}

// The candidates are locked in the order of the pending index; the window
// keeps the prefix whose payloads fit the byte budget (always at least the
// first row), and only the kept rows are leased. Candidates not kept are
// unlocked at the end of the statement, untouched. pg_column_size reads the
// varlena header only (it does not detoast), so the normal claim costs what
// it did.
const claimSQL = `
with due as (
    select id, next_attempt_at, created_at, pg_column_size(payload)::bigint as size
    from route_passport_outbox
    where status = 'PENDING'
      and next_attempt_at <= now()
      and (locked_until is null or locked_until < now())
      and not exists (select 1 from outbox_relay_control where paused)
    order by next_attempt_at, created_at
    limit $1
    for update skip locked
), sized as (
    select id,
           sum(size) over w as running,
           row_number() over w as n,
           count(*) over () as candidates
    from due
    window w as (order by next_attempt_at, created_at, id rows between unbounded preceding and current row)
), kept as (
    select id, candidates from sized where n = 1 or $4 <= 0 or running <= $4
)
update route_passport_outbox o
set locked_until = now() + $2 * interval '1 microsecond',
    lock_token = $3
from kept
where o.id = kept.id
returning o.id, o.route_id, o.event_type, o.topic, o.message_key, o.payload, o.headers::text,
          o.attempts, o.created_at, kept.candidates`

// releaseTokenSQL gives back every lease of one claim. Used only when a claim
// failed after its statement may have run; status = 'PENDING' lets it use
// the PENDING partial index instead of reading the whole table.
const releaseTokenSQL = `
update route_passport_outbox
set locked_until = null, lock_token = null
where status = 'PENDING' and lock_token = $1`

// Claim leases due PENDING rows, oldest first, within limits, for lease. Rows
// leased by another relay, or locked by another claim in progress, are
// skipped. All rows of one claim share a fresh token. While the relays are
// paused (outbox_relay_control) it claims nothing: the flag is read by the
// claim itself, so a pause takes effect on the very next claim of every relay.
//
// A row whose headers do not decode is returned with HeadersError set. When
// the claim fails after its statement may have run (lost connection, a
// cancelled context while reading the rows), the leases of this claim are
// given back (best effort), so that the rows are not stranded until the
// lease expires.
func (o *Outbox) Claim(ctx context.Context, limits ClaimLimits, lease time.Duration) (Claimed, error) {
	token := uuid.New()
	rows, err := o.pool.Query(ctx, claimSQL, limits.Rows, lease.Microseconds(), token, limits.Bytes)
	if err != nil {
		o.releaseToken(ctx, token)
		return Claimed{}, fmt.Errorf("claim outbox rows: %w", err)
	}
	out := make([]OutboxRow, 0, min(limits.Rows, 1024))
	var candidates int64
	var headers []byte
	for rows.Next() {
		r := OutboxRow{Token: token}
		if err := rows.Scan(&r.ID, &r.RouteID, &r.EventType, &r.Topic, &r.Key, &r.Payload, &headers, &r.Attempts, &r.CreatedAt, &candidates); err != nil {
			rows.Close()
			o.releaseToken(ctx, token)
			return Claimed{}, fmt.Errorf("scan claimed outbox row: %w", err)
		}
		if err := json.Unmarshal(headers, &r.Headers); err != nil {
			r.Headers = nil
			r.HeadersError = fmt.Sprintf("outbox row headers are not a JSON object of strings: %v", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		o.releaseToken(ctx, token)
		return Claimed{}, fmt.Errorf("claim outbox rows: %w", err)
	}
	// Oldest first, as claimed: UPDATE … RETURNING does not keep the CTE's
	// order, and publishing in created order keeps per-key order for a
	// single relay.
	sortRows(out)
	return Claimed{Rows: out, More: candidates > int64(len(out))}, nil
}

// releaseToken gives back the leases of a failed claim, on a context that
// outlives a cancelled ctx, for at most a few seconds. Errors are ignored:
// at worst the leases expire.
func (o *Outbox) releaseToken(ctx context.Context, token uuid.UUID) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = o.pool.Exec(c, releaseTokenSQL, token)
}

func leaseArrays(ls []Lease) (ids, tokens []uuid.UUID) {
	ids = make([]uuid.UUID, len(ls))
	tokens = make([]uuid.UUID, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}

const markPublishedSQL = `
update route_passport_outbox o
set status = 'PUBLISHED', published_at = now(), updated_at = now(),
    locked_until = null, lock_token = null
from unnest($1::uuid[], $2::uuid[]) as l(id, token)
where o.id = l.id and o.lock_token = l.token and o.status = 'PENDING'`

// MarkPublished marks the leased rows PUBLISHED in one statement and returns
// how many it changed; rows whose lease was taken over are left alone.
func (o *Outbox) MarkPublished(ctx context.Context, leases []Lease) (int64, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ids, tokens := leaseArrays(leases)
	tag, err := o.pool.Exec(ctx, markPublishedSQL, ids, tokens)
	if err != nil {
		return 0, fmt.Errorf("mark %d outbox rows published: %w", len(leases), err)
	}
	return tag.RowsAffected(), nil
}

const retrySQL = `
update route_passport_outbox o
set attempts = o.attempts + 1,
    max_attempts = $5,
    last_error = r.err,
    status = case when o.attempts + 1 >= $5 then 'FAILED' else 'PENDING' end,
    next_attempt_at = case when o.attempts + 1 >= $5 then o.next_attempt_at
                           else now() + r.delay_us * interval '1 microsecond' end,
    locked_until = null, lock_token = null, updated_at = now()
from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[]) as r(id, token, err, delay_us)
where o.id = r.id and o.lock_token = r.token and o.status = 'PENDING'
returning o.id, o.status, o.attempts, o.next_attempt_at`

// Retry records failed publishes in one statement: attempts + 1, last_error,
// max_attempts = maxAttempts (the relay's setting is authoritative), and
// either FAILED or PENDING again after the delay. The lease is released.
func (o *Outbox) Retry(ctx context.Context, retries []Retry, maxAttempts int) ([]RetryResult, error) {
	if len(retries) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(retries))
	tokens := make([]uuid.UUID, len(retries))
	errs := make([]string, len(retries))
	delays := make([]int64, len(retries))
	for i, r := range retries {
		ids[i], tokens[i], errs[i], delays[i] = r.ID, r.Token, r.Error, r.Delay.Microseconds()
	}
	rows, err := o.pool.Query(ctx, retrySQL, ids, tokens, errs, delays, maxAttempts)
	if err != nil {
		return nil, fmt.Errorf("reschedule %d outbox rows: %w", len(retries), err)
	}
	res, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RetryResult, error) {
		var r RetryResult
		err := row.Scan(&r.ID, &r.Status, &r.Attempts, &r.NextAttemptAt)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("reschedule %d outbox rows: %w", len(retries), err)
	}
	return res, nil
}

const releaseSQL = `
update route_passport_outbox o
set locked_until = null, lock_token = null
from unnest($1::uuid[], $2::uuid[]) as l(id, token)
where o.id = l.id and o.lock_token = l.token and o.status = 'PENDING'`

// Release gives leases back without counting an attempt (Kafka unreachable,
// shutdown), so the rows are due again at once for any relay.
func (o *Outbox) Release(ctx context.Context, leases []Lease) (int64, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ids, tokens := leaseArrays(leases)
	tag, err := o.pool.Exec(ctx, releaseSQL, ids, tokens)
	if err != nil {
		return 0, fmt.Errorf("release %d outbox leases: %w", len(leases), err)
	}
	return tag.RowsAffected(), nil
}

const postponeSQL = `
update route_passport_outbox o
set last_error = r.err,
    next_attempt_at = now() + r.delay_us * interval '1 microsecond',
    locked_until = null, lock_token = null, updated_at = now()
from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[]) as r(id, token, err, delay_us)
where o.id = r.id and o.lock_token = r.token and o.status = 'PENDING'`

// Postpone gives leases back without counting an attempt, like Release, but
// records the error in last_error and makes each row due only after its
// Delay: for failures that are the cluster's fault while the cluster still
// answers (a partition without a leader, not enough in-sync replicas). It
// returns how many rows it changed.
func (o *Outbox) Postpone(ctx context.Context, retries []Retry) (int64, error) {
	if len(retries) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, len(retries))
	tokens := make([]uuid.UUID, len(retries))
	errs := make([]string, len(retries))
	delays := make([]int64, len(retries))
	for i, r := range retries {
		ids[i], tokens[i], errs[i], delays[i] = r.ID, r.Token, r.Error, r.Delay.Microseconds()
	}
	tag, err := o.pool.Exec(ctx, postponeSQL, ids, tokens, errs, delays)
	if err != nil {
		return 0, fmt.Errorf("postpone %d outbox rows: %w", len(retries), err)
	}
	return tag.RowsAffected(), nil
}

// Control is the state of outbox_relay_control.
type Control struct {
	Paused    bool
	Reason    string
	UpdatedBy string
	UpdatedAt time.Time
}

// Control reads the pause flag that every relay honours.
func (o *Outbox) Control(ctx context.Context) (Control, error) {
	var c Control
	var reason, by *string
	err := o.pool.QueryRow(ctx, `select paused, reason, updated_by, updated_at from outbox_relay_control where id`).
		Scan(&c.Paused, &reason, &by, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Control{}, nil
	}
	if err != nil {
		return Control{}, fmt.Errorf("read outbox_relay_control: %w", err)
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
// the reason. It notifies the relays so that a resume takes effect at once.
func (o *Outbox) SetPaused(ctx context.Context, paused bool, reason, by string) error {
	var r *string
	if paused && reason != "" {
		r = &reason
	}
	return pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
insert into outbox_relay_control (id, paused, reason, updated_by, updated_at)
values (true, $1, $2, $3, now())
on conflict (id) do update set paused = $1, reason = $2, updated_by = $3, updated_at = now()`, paused, r, by)
		if err != nil {
			return fmt.Errorf("set outbox_relay_control: %w", err)
		}
		_, err = tx.Exec(ctx, `select pg_notify($1, '')`, NotifyChannel)
		return err
	})
}

// PendingSummary is what the pending gauges show.
type PendingSummary struct {
	Pending int64
	// OldestAge is now − created_at of the oldest PENDING row (0 if none).
	OldestAge time.Duration
}

// Pending counts PENDING rows and the age of the oldest; both read only the
// PENDING partial index.
func (o *Outbox) Pending(ctx context.Context) (PendingSummary, error) {
	var s PendingSummary
	var ageUS *int64
	err := o.pool.QueryRow(ctx, `
select count(*), (extract(epoch from now() - min(created_at)) * 1e6)::bigint
from route_passport_outbox where status = 'PENDING'`).Scan(&s.Pending, &ageUS)
	if err != nil {
		return s, fmt.Errorf("count pending outbox rows: %w", err)
	}
	if ageUS != nil && *ageUS > 0 {
		s.OldestAge = time.Duration(*ageUS) * time.Microsecond
	}
	return s, nil
}

// deletePublishedSQL finds its rows through the PUBLISHED partial index on
// published_at (migration 004), oldest first, so that the last statement of
// a sweep, which finds fewer rows than its limit, reads only the index range
// past retention instead of the whole heap. SKIP LOCKED: relays sweeping at
// the same moment split the rows instead of queueing on each other's locks.
const deletePublishedSQL = `
delete from route_passport_outbox
where ctid = any (array(
    select ctid from route_passport_outbox
    where status = 'PUBLISHED' and published_at < now() - $1 * interval '1 microsecond'
    order by published_at
    limit $2
    for update skip locked))`

// DeletePublished deletes up to limit PUBLISHED rows published before
// now − olderThan, oldest first, and returns how many it deleted. FAILED rows
// are kept. Rows another sweep is deleting are skipped, not waited for.
func (o *Outbox) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := o.pool.Exec(ctx, deletePublishedSQL, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete published outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
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
}

// FailureGroup counts FAILED rows with the same last_error.
type FailureGroup struct {
	LastError string `json:"lastError"`
	Count     int64  `json:"count"`
}

// estimateRowsSQL is the planner's estimate of the table's rows: reltuples
// (kept by autovacuum and ANALYZE) scaled to the table's current size, as
// the planner does. NULL when the table was never vacuumed or analyzed.
const estimateRowsSQL = `
select case
    when c.reltuples < 0 then null
    when c.relpages = 0 then c.reltuples::bigint
    else (c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::bigint))::bigint
end
from pg_class c where c.oid = 'route_passport_outbox'::regclass`

// Stats reads rows per status, the oldest pending age, FAILED rows grouped
// by last_error (most frequent first, up to 50 groups) and the pause flag.
// PENDING and FAILED rows are counted through their partial indexes; the
// PUBLISHED rows, nearly all of a large table, are estimated from the
// table's statistics unless exact is set (then the whole table is counted,
// which takes seconds at tens of millions of rows). A table never analyzed
// is counted exactly.
func (o *Outbox) Stats(ctx context.Context, exact bool) (Stats, error) {
	s := Stats{Counts: map[string]int64{StatusPending: 0, StatusPublished: 0, StatusFailed: 0}}
	p, err := o.Pending(ctx)
	if err != nil {
		return s, err
	}
	s.Counts[StatusPending] = p.Pending
	s.OldestPendingAgeSeconds = p.OldestAge.Seconds()
	var failed int64
	if err := o.pool.QueryRow(ctx, `select count(*) from route_passport_outbox where status = 'FAILED'`).Scan(&failed); err != nil {
		return s, fmt.Errorf("count failed outbox rows: %w", err)
	}
	s.Counts[StatusFailed] = failed
	var estimate *int64
	if !exact {
		if err := o.pool.QueryRow(ctx, estimateRowsSQL).Scan(&estimate); err != nil {
			return s, fmt.Errorf("estimate outbox rows: %w", err)
		}
	}
	if estimate != nil {
		s.Counts[StatusPublished] = max(0, *estimate-p.Pending-failed)
	} else {
		var n int64
		if err := o.pool.QueryRow(ctx, `select count(*) from route_passport_outbox where status = 'PUBLISHED'`).Scan(&n); err != nil {
			return s, fmt.Errorf("count published outbox rows: %w", err)
		}
		s.Counts[StatusPublished] = n
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

// ErrNoRows: a requeue by id or route id matched no row.
var ErrNoRows = errors.New("no outbox row matches")

// Requeue puts the selected rows back to PENDING with attempts reset, due now
// and with no lease, and notifies the relays. --failed takes FAILED rows;
// --id and --route-id take rows in any status (republishing a PUBLISHED row
// on purpose is an operator's right), except PENDING rows under a live lease:
// clearing that lease would let a second relay publish the row while its
// holder still is. A requeue by ID or RouteID that matches no row at all
// returns an error wrapping ErrNoRows.
func (o *Outbox) Requeue(ctx context.Context, f RequeueFilter) (RequeueResult, error) {
	var where, what string
	var args []any
	switch {
	case f.Failed:
		where = `status = 'FAILED'`
	case f.ID != nil:
		where, args, what = `id = $1`, []any{*f.ID}, "id "+f.ID.String()
	case f.RouteID != nil:
		where, args, what = `route_id = $1`, []any{*f.RouteID}, "route id "+f.RouteID.String()
	default:
		return RequeueResult{}, errors.New("requeue: no rows selected")
	}
	const inFlight = `(status = 'PENDING' and coalesce(locked_until > now(), false))`
	var res RequeueResult
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
update route_passport_outbox
set status = 'PENDING', attempts = 0, next_attempt_at = now(), locked_until = null,
    lock_token = null, published_at = null, updated_at = now()
where `+where+` and not `+inFlight, args...)
		if err != nil {
			return fmt.Errorf("requeue outbox rows: %w", err)
		}
		res.Requeued = tag.RowsAffected()
		if !f.Failed { // FAILED rows are never leased
			if err := tx.QueryRow(ctx, `select count(*) from route_passport_outbox where `+where+` and `+inFlight, args...).
				Scan(&res.InFlight); err != nil {
				return fmt.Errorf("requeue outbox rows: %w", err)
			}
		}
		if res.Requeued > 0 {
			_, err = tx.Exec(ctx, `select pg_notify($1, '')`, NotifyChannel)
		}
		return err
	})
	if err == nil && what != "" && res.Requeued == 0 && res.InFlight == 0 {
		return res, fmt.Errorf("requeue: %w %s", ErrNoRows, what)
	}
	return res, err
}

// Listen LISTENs on NotifyChannel on a dedicated connection and calls wake
// for every notification, and once after each (re)connect, since
// notifications sent while it was disconnected are lost. It reconnects after
// reconnectDelay until ctx ends, logging each lost connection.
func Listen(ctx context.Context, logger *slog.Logger, databaseURL string, reconnectDelay time.Duration, wake func()) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return errors.New("parse DATABASE_URL: invalid connection string")
	}
	// Log the first failure of an outage as a warning and the retries at
	// debug level; a successful (re)connect re-arms the warning.
	var quiet atomic.Bool
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, cfg)
		},
		LogError: func(ctx context.Context, err error) {
			switch {
			case ctx.Err() != nil:
			case quiet.Swap(true):
				logger.DebugContext(ctx, "relay: outbox listener still disconnected", "err", err)
			default:
				logger.WarnContext(ctx, "relay: outbox listener lost its connection; reconnecting (polling meanwhile)", "err", err, "retry_every", reconnectDelay)
			}
		},
		ReconnectDelay: reconnectDelay,
	}
	l.Handle(NotifyChannel, wakeHandler(func(connected bool) {
		if connected {
			quiet.Store(false)
		}
		wake()
	}))
	return l.Listen(ctx)
}

// wakeHandler is called with false for a notification and with true after
// each (re)connect.
type wakeHandler func(connected bool)

func (w wakeHandler) HandleNotification(context.Context, *pgconn.Notification, *pgx.Conn) error {
	w(false)
	return nil
}

// HandleBacklog runs after each (re)connect: rows inserted while no LISTEN
// was active sent notifications nobody heard.
func (w wakeHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	w(true)
	return nil
}

func sortRows(rs []OutboxRow) {
	slices.SortStableFunc(rs, func(a, b OutboxRow) int { return a.CreatedAt.Compare(b.CreatedAt) })
}
