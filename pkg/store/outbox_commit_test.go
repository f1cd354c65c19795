package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
)

// TestOutboxLeaseStatementsCommitAsynchronously: each statement that
// changes a lease turns synchronous_commit off for its own transaction,
// and only for it, except a retry that turns a row FAILED. Each runs here in a pipeline with a read of the
// setting, which PostgreSQL runs in the same implicit transaction, as the
// relay's one-statement transactions are; the connection's next
// transaction has the server's setting again (a pooler hands it to the
// ingestor next, whose commits must wait for the flush).
func TestOutboxLeaseStatementsCommitAsynchronously(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.Seed(t, b.pool, 8, "a", "b")
	// A connection of its own, synchronous as in production (the test
	// cluster's default is off).
	cfg := b.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["synchronous_commit"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	const server = "on"

	// leases claims two rows for one statement, so that each changes rows
	// of its own.
	leases := func() (ids, tokens []pgtype.UUID) {
		rows, err := claim(ctx, b, 2, time.Minute)
		require.NoError(t, err)
		require.Len(t, rows, 2)
		for _, r := range rows {
			ids = append(ids, pgtype.UUID{Bytes: r.ID, Valid: true})
			tokens = append(tokens, pgtype.UUID{Bytes: r.Token, Valid: true})
		}
		return ids, tokens
	}
	noBound := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	errs, delays := []string{"boom", "boom"}, []int64{1000, 1000}
	for _, st := range []struct {
		name string
		sql  string
		args func() []any
		// inTx is synchronous_commit in the statement's transaction.
		inTx string
		// counts: the statement returns how many rows it changed
		// instead of its command tag saying so.
		counts bool
	}{
		{"claim", store.ClaimSQL, func() []any {
			return []any{2, time.Minute.Microseconds(), pgtype.UUID{Bytes: uuid.New(), Valid: true}, 0, noBound}
		}, "off", false},
		{"mark", store.MarkPublishedSQL, func() []any { ids, tokens := leases(); return []any{ids, tokens[0]} }, "off", false},
		{"retry", store.RetrySQL, func() []any { ids, tokens := leases(); return []any{ids, tokens, errs, delays, 5} }, "off", false},
		// FAILED is logged and counted as final: it waits for the flush.
		{"retry to FAILED", store.RetrySQL, func() []any { ids, tokens := leases(); return []any{ids, tokens, errs, delays, 1} }, server, false},
		{"release", store.ReleaseSQL, func() []any { ids, tokens := leases(); return []any{ids, tokens} }, "off", true},
		{"postpone", store.PostponeSQL, func() []any { ids, tokens := leases(); return []any{ids, tokens, errs, delays} }, "off", true},
		{"give back claims", store.ReleaseTokensSQL, func() []any { _, tokens := leases(); return []any{tokens, noBound} }, "off", false},
	} {
		batch := &pgx.Batch{}
		batch.Queue(st.sql, st.args()...)
		batch.Queue(`select current_setting('synchronous_commit')`)
		br := conn.SendBatch(ctx, batch)
		var changed int64
		if st.counts {
			require.NoError(t, br.QueryRow().Scan(&changed), st.name)
		} else {
			tag, err := br.Exec()
			require.NoError(t, err, st.name)
			changed = tag.RowsAffected()
		}
		require.EqualValues(t, 2, changed, "%s: changed its two rows", st.name)
		var inTx string
		require.NoError(t, br.QueryRow().Scan(&inTx), st.name)
		require.NoError(t, br.Close(), st.name)
		require.Equal(t, st.inTx, inTx, "%s: synchronous_commit in its transaction", st.name)

		var after string
		require.NoError(t, conn.QueryRow(ctx, `select current_setting('synchronous_commit')`).Scan(&after), st.name)
		require.Equal(t, server, after, "%s: synchronous_commit in the connection's next transaction", st.name)
	}
}
