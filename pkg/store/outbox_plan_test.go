package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
)

// The statements that change leased rows must find each lease by primary key
// whatever the statistics say. Right after an ANALYZE that saw almost no
// PENDING row, a backlog builds: the planner, believing the PENDING index
// holds one row, drove the join from it and compared every pending row with
// every lease. In the soak that took a 300-row mark 2–27 s over 68,000
// pending rows, and the marks' slowness grew the backlog that slowed them.
func TestOutboxLeaseStatementsUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx, b := setupOutbox(t)
	relaytest.Seed(t, b.pool, 10_000, "a", "b")
	_, err := b.pool.Exec(ctx, `update route_passport_outbox set status = 'PUBLISHED', published_at = now()`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `vacuum analyze route_passport_outbox`)
	require.NoError(t, err)
	// A backlog the statistics have not seen.
	_, err = b.pool.Exec(ctx, `update route_passport_outbox set status = 'PENDING', published_at = null`)
	require.NoError(t, err)
	rows, err := claim(ctx, b, 300, time.Minute)
	require.NoError(t, err)
	require.Len(t, rows, 300)

	ids, tokens, errs, delays := make([]pgtype.UUID, len(rows)), make([]pgtype.UUID, len(rows)), make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		ids[i], tokens[i], errs[i], delays[i] = pgtype.UUID{Bytes: r.ID, Valid: true}, pgtype.UUID{Bytes: r.Token, Valid: true}, "boom", 1000
	}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"mark":     {store.MarkPublishedSQL, []any{ids, tokens[0]}}, // one claim
		"retry":    {store.RetrySQL, []any{ids, tokens, errs, delays, 5}},
		"release":  {store.ReleaseSQL, []any{ids, tokens}},
		"postpone": {store.PostponeSQL, []any{ids, tokens, errs, delays}},
	} {
		text := explain(ctx, t, b, q.sql, q.args...)
		require.Contains(t, text, "route_passport_outbox_pkey", "%s plan:\n%s", name, text)
		require.NotContains(t, text, "route_passport_outbox_pending_idx", "%s plan:\n%s", name, text)
		// Each of the table's scans: the retry's and the give-backs' second
		// part (the rows their lease already changed) as well.
		require.NotContains(t, text, "Seq Scan on route_passport_outbox", "%s plan:\n%s", name, text)
	}

	n, err := b.outbox.MarkPublished(ctx, leasesOf(rows))
	require.NoError(t, err)
	require.EqualValues(t, 300, n, "every lease marked")
}

// explain is the text of EXPLAIN sql with args.
func explain(ctx context.Context, t *testing.T, b *outboxBundle, sql string, args ...any) string {
	t.Helper()
	rows, err := b.pool.Query(ctx, `explain `+sql, args...)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}
