package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pcp/route-processing/pkg/outbox"
)

// The candidates are locked in the order of the pending index; the window
// keeps the prefix whose payloads fit the byte budget (always at least the
// first row), and only the kept rows are leased. Candidates not kept stay
// untouched, their row locks held to the end of the transaction (the
// statement's own, or leaseTx's one round trip later). pg_column_size reads the
// varlena header only (it does not detoast), so the normal claim costs what
// it did.
const claimSQL = `
with due as (
    select id, next_attempt_at, created_at, pg_column_size(payload)::bigint as size
    from route_passport_outbox
    where status = 'PENDING'
      and next_attempt_at >= $5
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
    lock_token = $3::uuid
from kept
where o.id = kept.id and ` + asyncCommit + `
returning o.id, o.route_id, o.event_type, o.topic, o.message_key, o.payload, o.headers::text,
          o.attempts, o.created_at, (extract(epoch from now() - o.created_at) * 1e6)::bigint, kept.candidates`

// releaseTokensSQL gives back every lease of the claims with these tokens
// that claimed from $2 on. Used only when a claim failed after its statement
// may have run. status = 'PENDING' and the bound let it read the PENDING
// partial index from where the claims read it, instead of the whole table
// or the whole index: under a held snapshot the index keeps every entry
// vacuum could not prune, and a give-back over all of them takes seconds.
const releaseTokensSQL = `
update route_passport_outbox
set locked_until = null, lock_token = null
where status = 'PENDING' and next_attempt_at >= $2 and lock_token = any($1::uuid[])
  and ` + asyncCommit

// Claim leases up to limit due PENDING rows, oldest first, for lease,
// stopping before the claimed payloads' stored sizes (pg_column_size: after
// TOAST compression, so the text the relay holds may be a few times larger)
// exceed maxBytes; the first row is always claimed, whatever its size, so
// that no row can block the outbox (maxBytes 0: no bound). more reports that
// due rows were left unclaimed because of the byte bound: claim again. Rows
// leased by another relay, or locked by another claim in progress, are
// skipped. All rows of one claim share a fresh token. While the relays are
// paused (outbox_relay_control) it claims nothing: the flag is read by the
// claim itself, so a pause takes effect on the very next claim of every relay.
//
// A row whose headers do not decode is returned with HeadersError set. When
// the claim fails after its statement may have run (lost connection, a
// cancelled context while reading the rows), the leases of this claim are
// given back (best effort), so that the rows are not stranded until the
// lease expires, and the token is remembered and given back again by later
// claims (see orphanedClaims) even when that give-back worked: the claim's
// statement may run after it (releaseToken). A claim that cannot have run
// (mayHaveRun) is neither given back nor remembered.
func (o *Outbox) Claim(ctx context.Context, limit int, maxBytes int64, lease time.Duration) (claimed []outbox.Row, more bool, err error) {
	return o.ClaimFrom(ctx, time.Time{}, limit, maxBytes, lease)
}

// ClaimFrom is Claim restricted to rows whose next_attempt_at is at or after
// from (the zero time: no bound). The PENDING index is on (next_attempt_at,
// created_at), so the scan starts at from: while a held snapshot keeps
// vacuum from removing the index entries of rows already marked, a bound
// just below the oldest live PENDING row ([Outbox.PendingFloor]) skips them
// instead of visiting each on every claim. Rows below from are not claimed;
// choosing from so that none is starved is the caller's job.
func (o *Outbox) ClaimFrom(ctx context.Context, from time.Time, limit int, maxBytes int64, lease time.Duration) (claimed []outbox.Row, more bool, err error) {
	o.releaseOrphans(ctx)
	err = o.leaseTx(ctx, func(q querier) error {
		claimed, more, err = o.claimOnce(ctx, q, from, limit, maxBytes, lease)
		return err
	})
	if err != nil {
		if len(claimed) > 0 {
			// The statement ran in an explicit transaction whose
			// commit failed: the commit may have reached the server.
			o.releaseToken(ctx, claimed[0].Token, from, lease, err)
		}
		return nil, false, err
	}
	return claimed, more, nil
}

// claimOnce runs claimSQL once on q under a new token.
func (o *Outbox) claimOnce(ctx context.Context, q querier, from time.Time, limit int, maxBytes int64, lease time.Duration) (claimed []outbox.Row, more bool, err error) {
	token := uuid.New()
	sent := time.Now()
	rows, err := q.Query(ctx, claimSQL, limit, lease.Microseconds(), uuidParam(token), maxBytes, lowerBound(from))
	if err != nil {
		o.releaseToken(ctx, token, from, lease, err)
		return nil, false, fmt.Errorf("claim outbox rows: %w", err)
	}
	// Sized by the first row's candidates, which no claim exceeds: a
	// capacity of limit was 100 KB zeroed per claim of a few rows, 40 MB/s
	// at 1,000 passports/s.
	var out []outbox.Row
	var candidates, ageMicros int64
	var headers []byte
	for rows.Next() {
		r := outbox.Row{Token: token}
		if err := rows.Scan(&r.ID, &r.RouteID, &r.EventType, &r.Topic, &r.Key, &r.Payload, &headers, &r.Attempts, &r.CreatedAt, &ageMicros, &candidates); err != nil {
			rows.Close()
			o.releaseToken(ctx, token, from, lease, err)
			return nil, false, fmt.Errorf("scan claimed outbox row: %w", err)
		}
		if out == nil {
			out = make([]outbox.Row, 0, candidates)
		}
		hs, herr := outbox.ParseHeadersJSON(headers)
		if herr != nil {
			r.HeadersError = fmt.Sprintf("outbox row headers are not a JSON object of strings: %v", herr)
		}
		r.Headers = hs
		r.AgeAtClaim = time.Duration(ageMicros) * time.Microsecond // at the statement's start
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		o.releaseToken(ctx, token, from, lease, err)
		return nil, false, fmt.Errorf("claim outbox rows: %w", err)
	}
	took := time.Since(sent)
	for i := range out {
		out[i].AgeAtClaim += took
	}
	// Oldest first, as claimed: UPDATE … RETURNING does not keep the CTE's
	// order, and publishing in created order keeps per-key order for a
	// single relay.
	slices.SortStableFunc(out, func(a, b outbox.Row) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, candidates > int64(len(out)), nil
}

// releaseTokenTimeout bounds the give-back of a failed claim. Short: the
// claim usually failed because the link or the server is in trouble, and
// the caller's own bound (the relay's claimCall) must not be lengthened by
// a second hung statement; healthy, it takes milliseconds. Leases it cannot
// give back are given back by later claims (orphanedClaims) or expire
// (OUTBOX_LOCK_TIMEOUT): delayed, never lost.
const releaseTokenTimeout = 500 * time.Millisecond

// lowerBound is from as a timestamptz parameter; the zero time is
// -infinity, so that one statement (one cached plan) serves both kinds of
// claim.
func lowerBound(from time.Time) pgtype.Timestamptz {
	if from.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: from, Valid: true}
}

// pendingFloorSQL: min() over the PENDING index from $1 is an index scan
// that stops at the first live entry; leased rows count (a released or
// expired lease keeps its next_attempt_at). least() ignores the NULL of an
// empty range. The clock is the database's, the one next_attempt_at is
// written with.
const pendingFloorSQL = `
select least(min(next_attempt_at), now() - $2 * interval '1 microsecond')
from route_passport_outbox
where status = 'PENDING' and next_attempt_at >= $1`

// PendingFloor returns the lowest next_attempt_at of the PENDING rows at or
// after from (the zero time: all of them), leased ones included, or
// now() − margin when that is lower (the database's clock): a lower bound
// for ClaimFrom that excludes no row committed so far, nor any row a
// transaction started after now() − margin commits later.
func (o *Outbox) PendingFloor(ctx context.Context, from time.Time, margin time.Duration) (time.Time, error) {
	var floor time.Time
	if err := o.pool.QueryRow(ctx, pendingFloorSQL, lowerBound(from), margin.Microseconds()).Scan(&floor); err != nil {
		return time.Time{}, fmt.Errorf("read outbox pending floor: %w", err)
	}
	return floor, nil
}

// releaseToken gives back the leases of a claim that failed with cause,
// unless its statement cannot have leased anything (mayHaveRun), and
// remembers the token for later claims to give back again, whether or not
// this give-back worked: one that works may have run before the claim did.
// A claim cut while it waits for a lock (an operator's LOCK TABLE) runs
// the moment the lock goes unless pgx's cancel request reached the server
// first, and the give-back, on another connection, does not wait for it.
func (o *Outbox) releaseToken(ctx context.Context, token uuid.UUID, from time.Time, lease time.Duration, cause error) {
	if !mayHaveRun(cause) {
		return
	}
	givenBack := o.giveBack(ctx, from, []uuid.UUID{token}) == nil
	o.orphans.add(token, from, lease, time.Now(), givenBack)
}

// mayHaveRun reports whether a claim that failed with err may have leased
// rows on the server, then or later: not when it never left the client
// (no connection, or pgconn.SafeToRetry), nor when the server answered it
// with an error that ended the statement (its implicit transaction rolled
// back). A FATAL one (the backend terminated) may come after the commit.
func mayHaveRun(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || pgconn.SafeToRetry(err) {
		return false
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) || isFatal(pgErr)
}

// giveBack runs releaseTokensSQL on a context that outlives a cancelled
// ctx, for at most releaseTokenTimeout.
func (o *Outbox) giveBack(ctx context.Context, from time.Time, tokens []uuid.UUID) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTokenTimeout)
	defer cancel()
	ts := make([]pgtype.UUID, len(tokens))
	for i, t := range tokens {
		ts[i] = uuidParam(t)
	}
	_, err := o.pool.Exec(c, releaseTokensSQL, o.leaseMode, ts, lowerBound(from))
	return err
}
