package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pcp/route-processing/pkg/outbox"
)

// The statements that end a lease: a row published, an attempt counted
// (FAILED after the last), or the lease given back. Each finds its rows by
// id and token (see Outbox) and runs through leaseTx. Each ends the lease
// by clearing locked_until and keeps the row's lock_token, so that each is
// idempotent: one whose commit was lost with its connection (a pooler
// restarted, a link cut after the server committed) is sent again by the
// relay (retryDB) and finds the rows it changed, which it would not if the
// first had cleared the token. The mark, the retry and the give-backs
// therefore also ask for a lease still held (locked_until set, if
// expired) before they change a row, and count a row whose token is theirs
// and whose lease has ended as one they changed before: a lease that
// ended can change its row no more, and the rows another relay claimed
// since carry that relay's token. A lease's rows are split between the
// statements (published, failed, postponed, given back), so a row with a
// lease's token is counted only by the statement that ended that lease.

// endedByLease, with a row joined to a lease by id and token, is a row that
// lease already ended by a retry, postpone or release: its token kept, its
// lease cleared, and not published (a mark under the same lease). The
// statements that end a lease count such rows as ones they changed.
const endedByLease = "o.locked_until is null and o.status <> 'PUBLISHED'"

// leaseArrays turns leases into the arrays the statements unnest.
func leaseArrays(ls []outbox.Lease) (ids, tokens []pgtype.UUID) {
	ids = make([]pgtype.UUID, len(ls))
	tokens = make([]pgtype.UUID, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = uuidParam(l.ID), uuidParam(l.Token)
	}
	return ids, tokens
}

// retryArrays is leaseArrays for retries, with their errors and delays.
func retryArrays(rs []outbox.Retry) (ids, tokens []pgtype.UUID, errs []string, delaysUS []int64) {
	ids, tokens = make([]pgtype.UUID, len(rs)), make([]pgtype.UUID, len(rs))
	errs, delaysUS = make([]string, len(rs)), make([]int64, len(rs))
	for i, r := range rs {
		ids[i], tokens[i], errs[i], delaysUS[i] = uuidParam(r.ID), uuidParam(r.Token), r.Error, r.Delay.Microseconds()
	}
	return ids, tokens, errs, delaysUS
}

// firstID names the first row of a batch in an error: enough to find the
// batch in the table, without a log line carrying hundreds of ids.
func firstID(id uuid.UUID) string { return "first " + id.String() }

// markPublishedSQL keeps the row's lock_token (the lease it was published
// under). Until 2026-12-05 it cleared it, and a mark sent again found
// nothing: it counted its rows as leases taken over, published_total fell
// short of the rows PUBLISHED, and the log said they would be published
// again, which they would not. A mark sent again leaves published_at as
// the first set it (the retention sweep reads it in order).
//
// It marks the rows of one claim ($1) under that claim's token ($2): the
// relay marks a batch, which is one claim, so that the statement is a scan
// of the primary key for an array of ids, with no join to plan and run.
// For the few rows of a mark at a steady rate that cost PostgreSQL a fifth
// less CPU than joining the table with the unnested pairs of ids and
// tokens, as the other statements that end a lease do (2,000 marks of 6
// rows, backend CPU per mark, two rounds: 415 and 465 µs against 560 and
// 535; the same within noise for 500 rows).
const markPublishedSQL = `
update route_passport_outbox o
set status = 'PUBLISHED', updated_at = now(),
    published_at = case when o.status = 'PUBLISHED' then o.published_at else now() end,
    locked_until = null
where o.id = any($1::uuid[]) and o.lock_token = $2::uuid
  and (o.locked_until is not null or o.status = 'PUBLISHED')
  and ` + asyncCommit

// MarkPublished marks the leased rows PUBLISHED and returns how many it
// changed; rows whose lease was taken over are left alone. It runs one
// statement per claim among leases (one, as the relay marks). It may be
// sent again after an error: rows it marked already count again.
func (o *Outbox) MarkPublished(ctx context.Context, leases []outbox.Lease) (int64, error) {
	var marked int64
	for _, claim := range byToken(leases) {
		tag, err := o.exec(ctx, markPublishedSQL, o.leaseMode, claim.ids, claim.token)
		if err != nil {
			return 0, fmt.Errorf("mark %d outbox rows published (%s): %w", len(leases), firstID(leases[0].ID), err)
		}
		marked += tag.RowsAffected()
	}
	return marked, nil
}

// claimLeases are the ids of the leases of one claim, and its token.
type claimLeases struct {
	token pgtype.UUID
	ids   []pgtype.UUID
}

// byToken groups leases by claim, in the order of each claim's first
// lease.
func byToken(leases []outbox.Lease) []claimLeases {
	var out []claimLeases
	for _, l := range leases {
		tok := uuidParam(l.Token)
		i := slices.IndexFunc(out, func(c claimLeases) bool { return c.token == tok })
		if i < 0 {
			out = append(out, claimLeases{token: tok})
			i = len(out) - 1
		}
		out[i].ids = append(out[i].ids, uuidParam(l.ID))
	}
	return out
}

// retrySQL returns the rows it changed and the rows this lease already
// changed (a retry sent again): the second part reads the statement's
// snapshot, in which the rows the first part changes still hold their
// lease, so no row is returned twice, and no attempt is counted twice.
const retrySQL = `
with r as (
    select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[]) as r(id, token, err, delay_us)
), counted as (
    update route_passport_outbox o
    set attempts = o.attempts + 1,
        max_attempts = $5,
        last_error = r.err,
        status = case when o.attempts + 1 >= $5 then 'FAILED' else 'PENDING' end,
        next_attempt_at = case when o.attempts + 1 >= $5 then o.next_attempt_at
                               else now() + r.delay_us * interval '1 microsecond' end,
        locked_until = null, updated_at = now()
    from r
    where o.id = r.id and o.lock_token = r.token and o.locked_until is not null
      and ` + asyncCommitUnlessFailed + `
    returning o.id, o.status, o.attempts, o.next_attempt_at
)
select id, status, attempts, next_attempt_at from counted
union all
select o.id, o.status, o.attempts, o.next_attempt_at
from route_passport_outbox o join r on o.id = r.id and o.lock_token = r.token
where ` + endedByLease

// asyncCommitUnlessFailed is asyncCommit for retrySQL, unless one of its
// rows turns FAILED: then the transaction keeps the server's setting. The
// relay logs a FAILED row as failed for good and counts it, and an
// operator may requeue it; a crash or failover that lost the mark would
// bring it back PENDING and leased, to be published after all (measured:
// claim, Retry to FAILED, pg_ctl stop -m immediate within the WAL
// writer's delay, and the row came back PENDING with 0 attempts). An
// attempt that leaves its row PENDING still commits asynchronously.
const asyncCommitUnlessFailed = `(select set_config('synchronous_commit',
    case when exists (select 1 from route_passport_outbox f join r on f.id = r.id and f.lock_token = r.token
                      where f.locked_until is not null and f.attempts + 1 >= $5)
         then current_setting('synchronous_commit') else 'off' end, true)) is not null`

// Retry records failed publishes in one statement: attempts + 1, last_error,
// max_attempts = maxAttempts (the relay's setting is authoritative), and
// either FAILED or PENDING again after the delay. The lease is released. It
// may be sent again after an error: rows it changed already are returned
// as they are, their attempt counted once.
func (o *Outbox) Retry(ctx context.Context, retries []outbox.Retry, maxAttempts int) ([]outbox.RetryResult, error) {
	if len(retries) == 0 {
		return nil, nil
	}
	ids, tokens, errs, delays := retryArrays(retries)
	var res []outbox.RetryResult
	err := o.leaseTx(ctx, func(q querier) error {
		rows, err := q.Query(ctx, retrySQL, o.leaseMode, ids, tokens, errs, delays, maxAttempts)
		if err != nil {
			return err
		}
		res, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.RetryResult, error) {
			var r outbox.RetryResult
			err := row.Scan(&r.ID, &r.Status, &r.Attempts, &r.NextAttemptAt)
			return r, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reschedule %d outbox rows (%s): %w", len(retries), firstID(retries[0].ID), err)
	}
	return res, nil
}

// releaseSQL counts the rows it gave back and those this lease gave back
// before (a release sent again), as retrySQL returns them.
const releaseSQL = `
with l as (
    select * from unnest($1::uuid[], $2::uuid[]) as l(id, token)
), released as (
    update route_passport_outbox o
    set locked_until = null
    from l
    where o.id = l.id and o.lock_token = l.token and o.locked_until is not null
      and ` + asyncCommit + `
    returning 1
)
select (select count(*) from released) + (
    select count(*)
    from route_passport_outbox o join l on o.id = l.id and o.lock_token = l.token
    where ` + endedByLease + `)`

// Release gives leases back without counting an attempt (Kafka unreachable,
// shutdown), so the rows are due again at once for any relay. It returns
// how many rows this lease gave back, counting those a release sent before
// it gave back.
func (o *Outbox) Release(ctx context.Context, leases []outbox.Lease) (int64, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ids, tokens := leaseArrays(leases)
	n, err := o.count(ctx, releaseSQL, o.leaseMode, ids, tokens)
	if err != nil {
		return 0, fmt.Errorf("release %d outbox leases (%s): %w", len(leases), firstID(leases[0].ID), err)
	}
	return n, nil
}

// postponeSQL counts the rows it postponed and those this lease postponed
// before (a postpone sent again), as retrySQL returns them.
const postponeSQL = `
with r as (
    select * from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[]) as r(id, token, err, delay_us)
), postponed as (
    update route_passport_outbox o
    set last_error = r.err,
        next_attempt_at = now() + r.delay_us * interval '1 microsecond',
        locked_until = null, updated_at = now()
    from r
    where o.id = r.id and o.lock_token = r.token and o.locked_until is not null
      and ` + asyncCommit + `
    returning 1
)
select (select count(*) from postponed) + (
    select count(*)
    from route_passport_outbox o join r on o.id = r.id and o.lock_token = r.token
    where ` + endedByLease + `)`

// Postpone gives leases back without counting an attempt, like Release, but
// records the error in last_error and makes each row due only after its
// Delay: for failures that are the cluster's fault while the cluster still
// answers (a partition without a leader, not enough in-sync replicas). It
// returns how many rows this lease postponed, counting those a postpone
// sent before it postponed.
func (o *Outbox) Postpone(ctx context.Context, retries []outbox.Retry) (int64, error) {
	if len(retries) == 0 {
		return 0, nil
	}
	ids, tokens, errs, delays := retryArrays(retries)
	n, err := o.count(ctx, postponeSQL, o.leaseMode, ids, tokens, errs, delays)
	if err != nil {
		return 0, fmt.Errorf("postpone %d outbox rows (%s): %w", len(retries), firstID(retries[0].ID), err)
	}
	return n, nil
}
