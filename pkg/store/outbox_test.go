package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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

func leasesOf(rows []store.OutboxRow) []store.Lease {
	out := make([]store.Lease, len(rows))
	for i, r := range rows {
		out[i] = store.Lease{ID: r.ID, Token: r.Token}
	}
	return out
}

func TestOutboxClaim(t *testing.T) {
	t.Parallel()

	t.Run("OldestFirstWithPayloadAndHeaders", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		var ins []relaytest.Row
		for i := 0; i < 3; i++ {
			ins = append(ins, relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t", Payload: []byte(`{"n": 1, "a": [1, 2]}`),
				Headers: map[string]string{"type": "X", "traceparent": "00-abc"}})...)
		}
		rows, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 3)
		for i, r := range rows {
			require.Equal(t, ins[i].ID, r.ID, "oldest first")
			require.JSONEq(t, `{"n": 1, "a": [1, 2]}`, string(r.Payload))
			require.Equal(t, map[string]string{"type": "X", "traceparent": "00-abc"}, r.Headers)
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
		relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t"}, relaytest.Row{Topic: "t"})
		first, err := b.outbox.Claim(ctx, 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, first, 1)
		second, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, second, 1)
		require.NotEqual(t, first[0].ID, second[0].ID)
		require.NotEqual(t, first[0].Token, second[0].Token)
		third, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, third)

		future := relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t"})[0]
		_, err = b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() + interval '1 hour' where id = $1`, future.ID)
		require.NoError(t, err)
		none, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, none)
	})

	t.Run("ExpiredLeaseIsTakenOverAndOldTokenChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t"})
		old, err := b.outbox.Claim(ctx, 10, 50*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, old, 1)
		time.Sleep(100 * time.Millisecond)
		cur, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, cur, 1)

		n, err := b.outbox.MarkPublished(ctx, leasesOf(old))
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.outbox.Release(ctx, leasesOf(old))
		require.NoError(t, err)
		require.Zero(t, n)
		res, err := b.outbox.Retry(ctx, []store.Retry{{ID: old[0].ID, Token: old[0].Token, Error: "x", Delay: time.Second}}, 3)
		require.NoError(t, err)
		require.Empty(t, res)
		st := relaytest.Get(t, b.pool, cur[0].ID)
		require.Equal(t, "PENDING", st.Status)
		require.Zero(t, st.Attempts)

		n, err = b.outbox.MarkPublished(ctx, leasesOf(cur))
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		st = relaytest.Get(t, b.pool, cur[0].ID)
		require.Equal(t, "PUBLISHED", st.Status)
		require.NotNil(t, st.PublishedAt)
		require.Nil(t, st.LockedUntil)
	})

	t.Run("PausedClaimsNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupOutbox(t)
		relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t"})
		require.NoError(t, b.outbox.SetPaused(ctx, true, "incident 42", "test"))
		c, err := b.outbox.Control(ctx)
		require.NoError(t, err)
		require.True(t, c.Paused)
		require.Equal(t, "incident 42", c.Reason)
		rows, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, rows)
		require.NoError(t, b.outbox.SetPaused(ctx, false, "", "test"))
		rows, err = b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}

func TestOutboxRetry(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	row := relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t", MaxAttempts: 99})[0]
	for attempt := 1; attempt <= 3; attempt++ {
		_, err := b.pool.Exec(ctx, `update route_passport_outbox set next_attempt_at = now() where id = $1`, row.ID)
		require.NoError(t, err)
		rows, err := b.outbox.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, attempt-1, rows[0].Attempts)
		before := time.Now()
		res, err := b.outbox.Retry(ctx, []store.Retry{{ID: row.ID, Token: rows[0].Token, Error: "too large", Delay: 10 * time.Second}}, 3)
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Equal(t, attempt, res[0].Attempts)
		st := relaytest.Get(t, b.pool, row.ID)
		require.Equal(t, 3, st.MaxAttempts, "the relay's max attempts is written into the row")
		require.Equal(t, "too large", *st.LastError)
		require.Nil(t, st.LockedUntil)
		if attempt < 3 {
			require.Equal(t, "PENDING", res[0].Status)
			require.WithinDuration(t, before.Add(10*time.Second), st.NextAttemptAt, 2*time.Second)
		} else {
			require.Equal(t, "FAILED", res[0].Status)
		}
	}

	t.Run("StatsAndRequeue", func(t *testing.T) {
		s, err := b.outbox.Stats(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Counts["FAILED"])
		require.Equal(t, []store.FailureGroup{{LastError: "too large", Count: 1}}, s.Failures)

		n, err := b.outbox.Requeue(ctx, store.RequeueFilter{Failed: true})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		st := relaytest.Get(t, b.pool, row.ID)
		require.Equal(t, "PENDING", st.Status)
		require.Zero(t, st.Attempts)
		require.WithinDuration(t, time.Now(), st.NextAttemptAt, 5*time.Second)

		id := row.ID
		n, err = b.outbox.Requeue(ctx, store.RequeueFilter{ID: &id})
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		other := uuid.New()
		n, err = b.outbox.Requeue(ctx, store.RequeueFilter{RouteID: &other})
		require.NoError(t, err)
		require.Zero(t, n)
		s, err = b.outbox.Stats(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Counts["PENDING"])
		require.Greater(t, s.OldestPendingAgeSeconds, 0.0)
	})
}

func TestOutboxReleaseAndRetention(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.MustInsert(t, b.pool, relaytest.Row{Topic: "t"}, relaytest.Row{Topic: "t"}, relaytest.Row{Topic: "t"})
	rows, err := b.outbox.Claim(ctx, 10, time.Minute)
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
	n, err = b.outbox.DeletePublished(ctx, time.Hour, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	s, err := b.outbox.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"PENDING": 1, "PUBLISHED": 1, "FAILED": 0}, s.Counts)
	p, err := b.outbox.Pending(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Pending)
}
