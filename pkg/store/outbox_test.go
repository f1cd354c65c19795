package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

type outboxBundle struct {
	pool   *pgxpool.Pool
	outbox *store.Outbox
}

func setupOutbox(t *testing.T) (context.Context, *outboxBundle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := testenv.Pool(t)
	return ctx, &outboxBundle{pool: pool, outbox: store.NewOutbox(pool)}
}

// claim claims up to n rows with no byte bound.
func claim(ctx context.Context, b *outboxBundle, n int, lease time.Duration) ([]outbox.Row, error) {
	rows, _, err := b.outbox.Claim(ctx, n, 0, lease)
	return rows, err
}

func leasesOf(rows []outbox.Row) []outbox.Lease {
	out := make([]outbox.Lease, len(rows))
	for i, r := range rows {
		out[i] = r.Lease()
	}
	return out
}

// TestOutboxClaimAgeByTheDatabasesClock: a claimed row's age is the
// database's now() less its created_at, whatever the relay's clock says
// (here a row 90 s old by the database's clock).
func TestOutboxClaimAgeByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	ins := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"})
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set created_at = now() - interval '90 seconds' where id = $1`, ins[0].ID)
	require.NoError(t, err)
	rows, err := claim(ctx, b, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.GreaterOrEqual(t, rows[0].AgeAtClaim, 90*time.Second)
	require.Less(t, rows[0].AgeAtClaim, 95*time.Second)
}

func TestOutboxClaim(t *testing.T) {
	t.Parallel()

	t.Run("OldestFirstWithPayloadAndHeaders", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		var ins []outbox.Event
		for i := 0; i < 3; i++ {
			ins = append(ins, relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t", Payload: []byte(`{"n": 1, "a": [1, 2]}`),
				Headers: outbox.OrderHeaders(map[string]string{"type": "X", "traceparent": "00-abc"})})...)
		}
		rows, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 3)
		for i, r := range rows {
			require.Equal(t, ins[i].ID, r.ID, "oldest first")
			require.JSONEq(t, `{"n": 1, "a": [1, 2]}`, string(r.Payload))
			require.Equal(t, []record.Header{{Key: "type", Value: []byte("X")}, {Key: "traceparent", Value: []byte("00-abc")}}, r.Headers,
				"decoded in publication order")
			require.Equal(t, rows[0].Token, r.Token, "one token per claim")
			require.NotEqual(t, uuid.Nil, r.Token)
			st := relaytest.Get(t, b.pool, r.ID)
			require.NotNil(t, st.LockedUntil)
			require.WithinDuration(t, time.Now().Add(time.Minute), *st.LockedUntil, 10*time.Second)
		}
	})

	t.Run("SkipsLeasedAndNotDueRows", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
		first, err := claim(ctx, b, 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, first, 1)
		second, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, second, 1)
		require.NotEqual(t, first[0].ID, second[0].ID)
		require.NotEqual(t, first[0].Token, second[0].Token)
		third, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, third)

		future := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"})[0]
		_, err = b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() + interval '1 hour' where id = $1`, future.ID)
		require.NoError(t, err)
		none, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, none)
	})

	t.Run("ExpiredLeaseIsTakenOverAndOldTokenChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"})
		old, err := claim(ctx, b, 10, 50*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, old, 1)
		time.Sleep(100 * time.Millisecond)
		cur, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, cur, 1)

		n, err := b.outbox.MarkPublished(ctx, leasesOf(old))
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.outbox.Release(ctx, leasesOf(old))
		require.NoError(t, err)
		require.Zero(t, n)
		res, err := b.outbox.Retry(ctx, []outbox.Retry{{ID: old[0].ID, Token: old[0].Token, Error: "x", Delay: time.Second}}, 3)
		require.NoError(t, err)
		require.Empty(t, res)
		st := relaytest.Get(t, b.pool, cur[0].ID)
		require.Equal(t, outbox.StatusPending, st.Status)
		require.Zero(t, st.Attempts)

		n, err = b.outbox.MarkPublished(ctx, leasesOf(cur))
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		st = relaytest.Get(t, b.pool, cur[0].ID)
		require.Equal(t, outbox.StatusPublished, st.Status)
		require.NotNil(t, st.PublishedAt)
		require.Nil(t, st.LockedUntil)
	})

	// A mark whose commit was lost with its connection is sent again: it
	// finds and counts its rows (it found none when the first mark cleared
	// the token), and keeps the first mark's published_at. Another lease's
	// mark still finds nothing.
	t.Run("MarkSentAgainCountsItsRows", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
		rows, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 2)
		n, err := b.outbox.MarkPublished(ctx, leasesOf(rows))
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		first := relaytest.Get(t, b.pool, rows[0].ID)
		require.NotNil(t, first.PublishedAt)

		n, err = b.outbox.MarkPublished(ctx, leasesOf(rows))
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the mark sent again counts the rows it marked before")
		again := relaytest.Get(t, b.pool, rows[0].ID)
		require.Equal(t, outbox.StatusPublished, again.Status)
		require.Nil(t, again.LockedUntil)
		require.True(t, first.PublishedAt.Equal(*again.PublishedAt), "published_at kept: %s then %s", first.PublishedAt, again.PublishedAt)

		// The lease that published the rows changes them no more.
		res, err := b.outbox.Retry(ctx, []outbox.Retry{{ID: rows[0].ID, Token: rows[0].Token, Error: "x", Delay: time.Second}}, 3)
		require.NoError(t, err)
		require.Empty(t, res, "a retry of a published lease")
		n, err = b.outbox.Postpone(ctx, []outbox.Retry{{ID: rows[0].ID, Token: rows[0].Token, Error: "x", Delay: time.Second}})
		require.NoError(t, err)
		require.Zero(t, n, "a postpone of a published lease")
		n, err = b.outbox.Release(ctx, leasesOf(rows))
		require.NoError(t, err)
		require.Zero(t, n, "a release of a published lease")
		require.Equal(t, outbox.StatusPublished, relaytest.Get(t, b.pool, rows[0].ID).Status)

		other := leasesOf(rows)
		for i := range other {
			other[i].Token = uuid.New()
		}
		n, err = b.outbox.MarkPublished(ctx, other)
		require.NoError(t, err)
		require.Zero(t, n, "another lease's mark changes nothing")
	})

	// A mark of the leases of two claims marks both (one statement each),
	// and only the rows each claim holds.
	t.Run("MarkOfTwoClaims", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
		first, err := claim(ctx, b, 2, time.Minute)
		require.NoError(t, err)
		second, err := claim(ctx, b, 2, time.Minute)
		require.NoError(t, err)
		require.Len(t, first, 2)
		require.Len(t, second, 1)
		leases := append(leasesOf(first[:1]), leasesOf(second)...)
		leases = append(leases, first[1].Lease())
		// A lease naming another claim's row changes nothing.
		leases = append(leases, outbox.Lease{ID: second[0].ID, Token: first[0].Token})
		n, err := b.outbox.MarkPublished(ctx, leases)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		require.Equal(t, 3, relaytest.Count(t, b.pool, outbox.StatusPublished))
	})

	// The other statements that end a lease, sent again after their commit
	// was lost, also find the rows they changed: a retry returns them as
	// they are (its attempt counted once, a FAILED row reported again, which
	// the relay logs as failed for good), a postpone or a release counts
	// them. Until 2026-12-07 each cleared the token and found nothing, so
	// the relay neither counted nor logged rows it had failed. A row
	// claimed again since carries the new lease's token and is not theirs.
	t.Run("RetryPostponeAndReleaseSentAgainFindTheirRows", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
		rows, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 4)
		failing, retried, postponed, released := rows[0], rows[1], rows[2], rows[3]
		_, err = b.pool.Exec(ctx, `update route_passport_outbox set attempts = 1 where id = $1::uuid`, failing.ID.String())
		require.NoError(t, err)

		retries := []outbox.Retry{
			{ID: failing.ID, Token: failing.Token, Error: "too large", Delay: time.Hour},
			{ID: retried.ID, Token: retried.Token, Error: "timed out", Delay: time.Hour},
		}
		first, err := b.outbox.Retry(ctx, retries, 2)
		require.NoError(t, err)
		byID := func(rs []outbox.RetryResult) map[uuid.UUID]outbox.RetryResult {
			m := map[uuid.UUID]outbox.RetryResult{}
			for _, r := range rs {
				m[r.ID] = r
			}
			return m
		}
		got := byID(first)
		require.Len(t, got, 2)
		require.Equal(t, outbox.StatusFailed, got[failing.ID].Status)
		require.Equal(t, 2, got[failing.ID].Attempts)
		require.Equal(t, outbox.StatusPending, got[retried.ID].Status)
		require.Equal(t, 1, got[retried.ID].Attempts)

		again, err := b.outbox.Retry(ctx, retries, 2)
		require.NoError(t, err)
		require.Len(t, again, 2, "the retry sent again returns the rows it rescheduled")
		for id, r := range byID(again) {
			require.Equal(t, got[id].Status, r.Status)
			require.Equal(t, got[id].Attempts, r.Attempts, "an attempt counted once")
			require.True(t, got[id].NextAttemptAt.Equal(r.NextAttemptAt), "next_attempt_at kept: %s then %s", got[id].NextAttemptAt, r.NextAttemptAt)
		}
		require.Equal(t, 1, relaytest.Get(t, b.pool, retried.ID).Attempts)

		pp := []outbox.Retry{{ID: postponed.ID, Token: postponed.Token, Error: "no leader", Delay: time.Hour}}
		n, err := b.outbox.Postpone(ctx, pp)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		before := relaytest.Get(t, b.pool, postponed.ID)
		n, err = b.outbox.Postpone(ctx, pp)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the postpone sent again counts the row it postponed")
		after := relaytest.Get(t, b.pool, postponed.ID)
		require.True(t, before.NextAttemptAt.Equal(after.NextAttemptAt), "next_attempt_at kept: %s then %s", before.NextAttemptAt, after.NextAttemptAt)
		require.Zero(t, after.Attempts)

		for range 2 {
			n, err = b.outbox.Release(ctx, []outbox.Lease{released.Lease()})
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a release, first or sent again, counts the row it gave back")
		}
		st := relaytest.Get(t, b.pool, released.ID)
		require.Equal(t, outbox.StatusPending, st.Status)
		require.Nil(t, st.LockedUntil)

		// A mark under the same lease publishes none of them.
		n, err = b.outbox.MarkPublished(ctx, leasesOf(rows[1:]))
		require.NoError(t, err)
		require.Zero(t, n, "a mark of rows the lease rescheduled or gave back")
		require.Zero(t, relaytest.Count(t, b.pool, outbox.StatusPublished))

		// Claimed again, a row belongs to its new lease.
		for _, id := range []uuid.UUID{retried.ID, postponed.ID} {
			_, err = b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() where id = $1::uuid`, id.String())
			require.NoError(t, err)
		}
		reclaimed, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, reclaimed, 3, "the retried, postponed and released rows")
		again, err = b.outbox.Retry(ctx, retries, 2)
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.Equal(t, failing.ID, again[0].ID, "only the row no lease took since")
		n, err = b.outbox.Postpone(ctx, pp)
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.outbox.Release(ctx, []outbox.Lease{released.Lease()})
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.outbox.MarkPublished(ctx, leasesOf(reclaimed))
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
	})

	t.Run("PausedClaimsNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"})
		require.NoError(t, b.outbox.SetPaused(ctx, true, "incident 42", "test"))
		c, err := b.outbox.Control(ctx)
		require.NoError(t, err)
		require.True(t, c.Paused)
		require.Equal(t, "incident 42", c.Reason)
		rows, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, rows)
		require.NoError(t, b.outbox.SetPaused(ctx, false, "", "test"))
		rows, err = claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}

func TestOutboxRetry(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	row := relaytest.MustInsertMaxAttempts(t, b.pool, 99, outbox.Event{Topic: "t"})[0]
	for attempt := 1; attempt <= 3; attempt++ {
		_, err := b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() where id = $1`, row.ID)
		require.NoError(t, err)
		rows, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, attempt-1, rows[0].Attempts)
		before := time.Now()
		res, err := b.outbox.Retry(ctx, []outbox.Retry{{ID: row.ID, Token: rows[0].Token, Error: "too large", Delay: 10 * time.Second}}, 3)
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Equal(t, attempt, res[0].Attempts)
		st := relaytest.Get(t, b.pool, row.ID)
		require.Equal(t, 3, st.MaxAttempts, "the relay's max attempts is written into the row")
		require.Equal(t, "too large", *st.LastError)
		require.Nil(t, st.LockedUntil)
		if attempt < 3 {
			require.Equal(t, outbox.StatusPending, res[0].Status)
			require.WithinDuration(t, before.Add(10*time.Second), st.NextAttemptAt, 2*time.Second)
		} else {
			require.Equal(t, outbox.StatusFailed, res[0].Status)
		}
	}

	t.Run("StatsAndRequeue", func(t *testing.T) {
		s, err := b.outbox.Stats(ctx, false)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Counts[outbox.StatusFailed])
		require.Equal(t, []store.FailureGroup{{LastError: "too large", Count: 1}}, s.Failures)

		res, err := b.outbox.Requeue(ctx, store.RequeueFilter{Failed: true})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Requeued)
		st := relaytest.Get(t, b.pool, row.ID)
		require.Equal(t, outbox.StatusPending, st.Status)
		require.Zero(t, st.Attempts)
		require.WithinDuration(t, time.Now(), st.NextAttemptAt, 5*time.Second)

		id := row.ID
		res, err = b.outbox.Requeue(ctx, store.RequeueFilter{ID: &id})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Requeued)
		other := uuid.New()
		res, err = b.outbox.Requeue(ctx, store.RequeueFilter{RouteID: &other})
		require.ErrorIs(t, err, store.ErrNoMatch, "a route id that matches nothing is an error")
		require.Zero(t, res.Requeued)
		s, err = b.outbox.Stats(ctx, false)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Counts[outbox.StatusPending])
		require.Greater(t, s.OldestPendingAgeSeconds, 0.0)
	})
}

func TestOutboxReleaseAndRetention(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	rows, err := claim(ctx, b, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	n, err := b.outbox.Release(ctx, leasesOf(rows[2:]))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	st := relaytest.Get(t, b.pool, rows[2].ID)
	require.Zero(t, st.Attempts, "a release counts no attempt")
	require.Nil(t, st.LockedUntil)

	n, err = b.outbox.MarkPublished(ctx, leasesOf(rows[:2]))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set published_at = now() - interval '2 hours' where id = $1`, rows[0].ID)
	require.NoError(t, err)
	n, _, err = b.outbox.DeletePublished(ctx, time.Hour, 1000, time.Time{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	s, err := b.outbox.Stats(ctx, true)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{outbox.StatusPending: 1, outbox.StatusPublished: 1, outbox.StatusFailed: 0}, s.Counts)
	require.True(t, s.PublishedExact)
	p, err := b.outbox.Pending(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Pending)
}

// TestOutboxClaimByteBudget: a claim stops before its payloads' stored sizes
// pass the budget (always keeping the first row) and says that more are due.
func TestOutboxClaimByteBudget(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	big := make([]byte, 0, 200_000)
	big = append(big, `{"blob":"`...)
	for i := 0; len(big) < 200_000; i++ {
		big = append(big, uuid.New().String()...) // poorly compressible
	}
	big = append(big, `"}`...)
	for i := 0; i < 5; i++ {
		relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t", Payload: big})
	}
	var size int64
	require.NoError(t, b.pool.QueryRow(ctx, `select max(pg_column_size(payload)) from route_passport_outbox`).Scan(&size))
	t.Logf("stored payload size %d bytes (text %d)", size, len(big))

	c, more, err := b.outbox.Claim(ctx, 10, 2*size+size/2, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 2, "two rows fit the budget")
	require.True(t, more)

	c, more, err = b.outbox.Claim(ctx, 10, 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 1, "a row larger than the budget is still claimed, alone")
	require.True(t, more)

	c, more, err = b.outbox.Claim(ctx, 10, 16<<20, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 2)
	require.False(t, more, "everything due was claimed")

	var leased int
	require.NoError(t, b.pool.QueryRow(ctx, `select count(*) from route_passport_outbox where locked_until > now()`).Scan(&leased))
	require.Equal(t, 5, leased, "rows left out of a claim are not leased by it")
}

// TestOutboxClaimBadHeaders: a row whose headers are not a JSON object of
// strings does not fail the claim of its neighbours.
func TestOutboxClaimBadHeaders(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	rows := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set headers = '{"type": 5}' where id = $1`, rows[1].ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set headers = '["type"]' where id = $1`, rows[2].ID)
	require.NoError(t, err)
	claimed, err := claim(ctx, b, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	byID := map[uuid.UUID]outbox.Row{}
	for _, r := range claimed {
		byID[r.ID] = r
	}
	require.Empty(t, byID[rows[0].ID].HeadersError)
	require.Equal(t, rows[0].Headers, byID[rows[0].ID].Headers)
	for _, r := range rows[1:] {
		require.Contains(t, byID[r.ID].HeadersError, "headers are not a JSON object of strings")
		require.Nil(t, byID[r.ID].Headers)
	}
}

// TestOutboxFailedClaimReleasesItsLeases: a claim that fails after its
// statement ran (here a row the driver cannot scan) gives its leases back
// instead of stranding the batch until the lease expires.
func TestOutboxFailedClaimReleasesItsLeases(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	rows := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set created_at = 'infinity' where id = $1`, rows[2].ID)
	require.NoError(t, err)
	_, err = claim(ctx, b, 10, time.Hour)
	require.Error(t, err)
	for _, r := range rows {
		require.Nil(t, relaytest.Get(t, b.pool, r.ID).LockedUntil, "lease of %s given back", r.ID)
	}
}

func TestOutboxPostpone(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	row := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"})[0]
	rows, err := claim(ctx, b, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	before := time.Now()
	n, err := b.outbox.Postpone(ctx, []outbox.Retry{{ID: row.ID, Token: uuid.New(), Error: "x", Delay: time.Minute}})
	require.NoError(t, err)
	require.Zero(t, n, "a foreign token changes nothing")
	n, err = b.outbox.Postpone(ctx, []outbox.Retry{{ID: row.ID, Token: rows[0].Token, Error: "Local: Message timed out", Delay: 10 * time.Second}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	st := relaytest.Get(t, b.pool, row.ID)
	require.Equal(t, outbox.StatusPending, st.Status)
	require.Zero(t, st.Attempts, "no attempt counted")
	require.Equal(t, "Local: Message timed out", *st.LastError)
	require.Nil(t, st.LockedUntil)
	require.WithinDuration(t, before.Add(10*time.Second), st.NextAttemptAt, 2*time.Second)
}

// TestOutboxRequeueSkipsInFlight: a requeue by id does not clear the lease of
// a PENDING row a relay is publishing, so that relay's mark still lands and
// no second relay publishes it meanwhile.
func TestOutboxRequeueSkipsInFlight(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	rows := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	claimed, _, err := b.outbox.Claim(ctx, 1, 0, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	leased := claimed[0]

	res, err := b.outbox.Requeue(ctx, store.RequeueFilter{ID: &leased.ID})
	require.NoError(t, err)
	require.Equal(t, store.RequeueResult{Requeued: 0, InFlight: 1}, res)
	n, err := b.outbox.MarkPublished(ctx, leasesOf(claimed))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the holder's lease survived the requeue")

	other := rows[0]
	if other.ID == leased.ID {
		other = rows[1]
	}
	res, err = b.outbox.Requeue(ctx, store.RequeueFilter{ID: &other.ID})
	require.NoError(t, err)
	require.Equal(t, store.RequeueResult{Requeued: 1}, res, "an unleased PENDING row is requeued")
	res, err = b.outbox.Requeue(ctx, store.RequeueFilter{RouteID: &leased.RouteID})
	require.NoError(t, err)
	require.Equal(t, store.RequeueResult{Requeued: 1}, res, "a PUBLISHED row is requeued")
	missing := uuid.New()
	_, err = b.outbox.Requeue(ctx, store.RequeueFilter{ID: &missing})
	require.ErrorIs(t, err, store.ErrNoMatch)
	res, err = b.outbox.Requeue(ctx, store.RequeueFilter{Failed: true})
	require.NoError(t, err, "--failed matching nothing is not an error")
	require.Zero(t, res.Requeued)
}

// A requeue that PostgreSQL ends as a deadlock victim (its rows locked in
// the other order by another transaction, as a relay's mark or a second
// requeue does) is run again instead of failing the operator's command
// with 40P01.
func TestOutboxRequeueRunsAgainAfterADeadlock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// PostgreSQL checks a wait for a deadlock once, deadlock_timeout into
	// it, and the session whose check finds the cycle is the victim. The
	// requeue's check comes 3 s into its wait, well after the other
	// transaction below starts waiting however late this test is
	// scheduled (at the default 1 s, a test slowed by a loaded machine
	// formed the cycle after the requeue's check, and the other
	// transaction's own check then found it); the other's check is put off
	// past the test's end.
	pool, err := store.Open(ctx, withParam(testenv.DatabaseURL(t), "deadlock_timeout=3s"), "test")
	require.NoError(t, err)
	defer pool.Close()
	b := &outboxBundle{pool: pool, outbox: store.NewOutbox(pool)}
	rows := relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	for _, r := range rows {
		_, err := b.pool.Exec(ctx, `update route_passport_outbox set status = 'FAILED' where id = $1`, r.ID)
		require.NoError(t, err)
	}
	// The other transaction holds the second row; the requeue (a scan in
	// the rows' order) locks the first and waits for the second.
	other, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `set local deadlock_timeout = '5min'`)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `select 1 from route_passport_outbox where id = $1 for update`, rows[1].ID)
	require.NoError(t, err)

	type result struct {
		res store.RequeueResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.outbox.Requeue(ctx, store.RequeueFilter{Failed: true})
		done <- result{res, err}
	}()
	require.Eventually(t, func() bool {
		var n int
		err := b.pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and query like '%update route_passport_outbox%'`).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, "the requeue waits for the second row")

	// Now the other transaction waits for the first row: a deadlock. The
	// requeue's check finds it and ends the requeue's transaction, which
	// frees the first row.
	start := time.Now()
	_, err = other.Exec(ctx, `select 1 from route_passport_outbox where id = $1 for update`, rows[0].ID)
	require.NoError(t, err, "the requeue, not this transaction, is the deadlock's victim")
	require.Greater(t, time.Since(start), 200*time.Millisecond, "the requeue held the first row (no deadlock happened)")
	require.NoError(t, other.Commit(ctx))

	select {
	case r := <-done:
		require.NoError(t, r.err, "the requeue is run again after the deadlock")
		require.EqualValues(t, 2, r.res.Requeued)
	case <-time.After(30 * time.Second):
		t.Fatal("the requeue did not end")
	}
}

// TestOutboxRetentionUsesIndex: the sweep finds its rows through the
// PUBLISHED partial index on published_at, not by reading the heap.
func TestOutboxRetentionUsesIndex(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.Seed(t, b.pool, 10_000, "a", "b")
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `vacuum analyze route_passport_outbox`)
	require.NoError(t, err)
	text := explain(ctx, t, b, store.DeletePublishedSQL, time.Hour.Microseconds(), 1000, time.Time{})
	t.Logf("plan:\n%s", text)
	require.Contains(t, text, "route_passport_outbox_published_idx")
	require.NotContains(t, text, "Seq Scan")
	n, _, err := b.outbox.DeletePublished(ctx, time.Hour, 1000, time.Time{})
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestOutboxRetentionSkipsLockedRows: two sweeps at once split the rows; one
// does not wait for the other's locks.
func TestOutboxRetentionSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"}, outbox.Event{Topic: "t"})
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var locked uuid.UUID
	require.NoError(t, tx.QueryRow(ctx, `select id from route_passport_outbox order by id limit 1 for update`).Scan(&locked))

	sweepCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, _, err := b.outbox.DeletePublished(sweepCtx, time.Hour, 1000, time.Time{})
	require.NoError(t, err, "the sweep did not wait for the other's lock")
	require.EqualValues(t, 2, n)
	require.NoError(t, tx.Rollback(ctx))
	n, _, err = b.outbox.DeletePublished(ctx, time.Hour, 1000, time.Time{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestOutboxStatsEstimatesPublished: PUBLISHED comes from the table's
// statistics unless exact is asked for; PENDING and FAILED are exact.
func TestOutboxStatsEstimatesPublished(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.Seed(t, b.pool, 500, "a", "b")
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now()
where id in (select id from route_passport_outbox order by id limit 900)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'FAILED'
where id in (select id from route_passport_outbox where status = 'PENDING' order by id limit 30)`)
	require.NoError(t, err)
	// The seeding sessions' counts reach the statistics system when they
	// flush (idle, within about 10 s); counts flushed after the vacuum
	// below would add to the live tuples it sets.
	require.Eventually(t, func() bool {
		var ins int64
		require.NoError(t, b.pool.QueryRow(ctx, `select n_tup_ins from pg_stat_user_tables where relid = 'route_passport_outbox'::regclass`).Scan(&ins))
		return ins >= 1000
	}, 20*time.Second, 100*time.Millisecond, "insert counts flushed")
	_, err = b.pool.Exec(ctx, `vacuum analyze route_passport_outbox`)
	require.NoError(t, err)

	s, err := b.outbox.Stats(ctx, false)
	require.NoError(t, err)
	require.False(t, s.PublishedExact)
	require.EqualValues(t, 70, s.Counts[outbox.StatusPending])
	require.EqualValues(t, 30, s.Counts[outbox.StatusFailed])
	require.InDelta(t, 900, s.Counts[outbox.StatusPublished], 90, "estimate")

	s, err = b.outbox.Stats(ctx, true)
	require.NoError(t, err)
	require.True(t, s.PublishedExact)
	require.EqualValues(t, 900, s.Counts[outbox.StatusPublished])

	// Retention deletes most PUBLISHED rows and new ones are published,
	// with no vacuum or analyze since: the estimate follows (it read 5 of
	// 50,008 on the planner's stale reltuples in a review).
	_, err = b.pool.Exec(ctx, `delete from route_passport_outbox where id in (select id from route_passport_outbox where status = 'PUBLISHED' order by id limit 800)`)
	require.NoError(t, err)
	relaytest.Seed(t, b.pool, 300, "a", "b")
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() where status = 'PENDING'`)
	require.NoError(t, err)
	// 100 + 70 + 600: the statistics system hears of the writes when their
	// sessions flush (within about 10 s).
	var last int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		s, err := b.outbox.Stats(ctx, false)
		require.NoError(t, err)
		require.False(t, s.PublishedExact)
		if last = s.Counts[outbox.StatusPublished]; last >= 700 && last <= 840 {
			break
		}
		require.True(t, time.Now().Before(deadline), "estimate after retention and new rows: %d, want 770 ± 10 %%", last)
	}

	// Statistics reset (pg_stat_reset, crash recovery, a promoted standby):
	// n_live_tup then counts only what was written since, so the planner's
	// estimate stands in until the next vacuum or analyze.
	_, err = b.pool.Exec(ctx, `select pg_stat_reset_single_table_counters('route_passport_outbox'::regclass)`)
	require.NoError(t, err)
	relaytest.Seed(t, b.pool, 10, "a", "b")
	time.Sleep(1500 * time.Millisecond) // past the statistics' 1-s flush interval
	s, err = b.outbox.Stats(ctx, false)
	require.NoError(t, err)
	require.False(t, s.PublishedExact)
	require.Greater(t, s.Counts[outbox.StatusPublished], int64(500), "after a statistics reset")
}

// TestOutboxMarkPlannedForTheTableItFinds: the statements that find leases
// by id and token are planned with each call. A relay that starts on an
// empty outbox marks its first rows while the table is a few pages, where a
// hash join over a whole-table scan is the cheapest plan; a plan cached
// then (PostgreSQL keeps a generic plan from the sixth execution of a
// prepared statement) would scan the whole table for every mark once it
// has grown. One connection, so that the statistics read are the ones the
// marks left.
func TestOutboxMarkPlannedForTheTableItFinds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := &outboxBundle{pool: pool, outbox: store.NewOutbox(pool)}

	claimAndMark := func() {
		t.Helper()
		rows, err := claim(ctx, b, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 2) // Seed writes two events per passport
		n, err := b.outbox.MarkPublished(ctx, leasesOf(rows))
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
	}
	for i := range 8 { // past the fifth execution, on a table of a few rows
		relaytest.Seed(t, pool, 1, "small", string(rune('a'+i)))
		claimAndMark()
	}
	relaytest.Seed(t, pool, 10_000, "grown", "x")
	_, err = pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now() where status = 'PENDING'`)
	require.NoError(t, err)
	relaytest.Seed(t, pool, 1, "last", "y")

	stats := func() (seqScans, updates int64) {
		t.Helper()
		_, err := pool.Exec(ctx, `select pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `select seq_scan, n_tup_upd from pg_stat_user_tables
			where relname = 'route_passport_outbox'`).Scan(&seqScans, &updates))
		return seqScans, updates
	}
	scans0, upd0 := stats()
	claimAndMark()
	scans1, upd1 := stats()
	require.Equal(t, int64(4), upd1-upd0, "the claim's and the mark's updates are counted (statistics flushed)")
	require.Equal(t, scans0, scans1, "the mark on the grown table scanned it whole")
}
