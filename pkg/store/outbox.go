package store

import (
	"context"
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
	Headers   map[string]string
	Attempts  int
	CreatedAt time.Time
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

const claimSQL = `
with due as (
    select id
    from route_passport_outbox
    where status = 'PENDING'
      and next_attempt_at <= now()
      and (locked_until is null or locked_until < now())
      and not exists (select 1 from outbox_relay_control where paused)
    order by next_attempt_at, created_at
    limit $1
    for update skip locked
)
update route_passport_outbox o
set locked_until = now() + $2 * interval '1 microsecond',
    lock_token = $3
from due
where o.id = due.id
returning o.id, o.route_id, o.event_type, o.topic, o.message_key, o.payload, o.headers,
          o.attempts, o.created_at`

// Claim leases up to limit due PENDING rows, oldest first, for lease. Rows
// leased by another relay, or locked by another claim in progress, are
// skipped. All rows of one claim share a fresh token. While the relays are
// paused (outbox_relay_control) it claims nothing: the flag is read by the
// claim itself, so a pause takes effect on the very next claim of every relay.
func (o *Outbox) Claim(ctx context.Context, limit int, lease time.Duration) ([]OutboxRow, error) {
	token := uuid.New()
	rows, err := o.pool.Query(ctx, claimSQL, limit, lease.Microseconds(), token)
	if err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	out := make([]OutboxRow, 0, limit)
	for rows.Next() {
		r := OutboxRow{Token: token}
		if err := rows.Scan(&r.ID, &r.RouteID, &r.EventType, &r.Topic, &r.Key, &r.Payload, &r.Headers, &r.Attempts, &r.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan claimed outbox row: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	// Oldest first, as claimed: UPDATE … RETURNING does not keep the CTE's
	// order, and publishing in created order keeps per-key order for a
	// single relay.
	sortRows(out)
	return out, nil
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

// DeletePublished deletes up to limit PUBLISHED rows published before
// now − olderThan and returns how many it deleted. FAILED rows are kept.
func (o *Outbox) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := o.pool.Exec(ctx, `
delete from route_passport_outbox
where ctid = any (array(
    select ctid from route_passport_outbox
    where status = 'PUBLISHED' and published_at < now() - $1 * interval '1 microsecond'
    limit $2))`, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete published outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Stats is the answer of `outbox-relay stats`.
type Stats struct {
	Counts map[string]int64 `json:"counts"`
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

// Stats reads rows per status, the oldest pending age, FAILED rows grouped
// by last_error (most frequent first, up to 50 groups) and the pause flag.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Counts: map[string]int64{StatusPending: 0, StatusPublished: 0, StatusFailed: 0}}
	rows, err := o.pool.Query(ctx, `select status, count(*) from route_passport_outbox group by status`)
	if err != nil {
		return s, fmt.Errorf("count outbox rows: %w", err)
	}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return s, fmt.Errorf("count outbox rows: %w", err)
		}
		s.Counts[st] = n
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("count outbox rows: %w", err)
	}
	p, err := o.Pending(ctx)
	if err != nil {
		return s, err
	}
	s.OldestPendingAgeSeconds = p.OldestAge.Seconds()
	rows, err = o.pool.Query(ctx, `
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

// Requeue puts the selected rows back to PENDING with attempts reset, due now
// and with no lease, and notifies the relays. It returns how many rows it
// changed. --failed takes FAILED rows; --id and --route-id take rows in any
// status (republishing a PUBLISHED row on purpose is an operator's right).
func (o *Outbox) Requeue(ctx context.Context, f RequeueFilter) (int64, error) {
	var where string
	var args []any
	switch {
	case f.Failed:
		where = `status = 'FAILED'`
	case f.ID != nil:
		where, args = `id = $1`, []any{*f.ID}
	case f.RouteID != nil:
		where, args = `route_id = $1`, []any{*f.RouteID}
	default:
		return 0, errors.New("requeue: no rows selected")
	}
	var n int64
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
update route_passport_outbox
set status = 'PENDING', attempts = 0, next_attempt_at = now(), locked_until = null,
    lock_token = null, published_at = null, updated_at = now()
where `+where, args...)
		if err != nil {
			return fmt.Errorf("requeue outbox rows: %w", err)
		}
		n = tag.RowsAffected()
		if n > 0 {
			_, err = tx.Exec(ctx, `select pg_notify($1, '')`, NotifyChannel)
		}
		return err
	})
	return n, err
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
