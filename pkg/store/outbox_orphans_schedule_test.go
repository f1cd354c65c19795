package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestOrphanedClaimsSchedule: a remembered token is due at once (250 ms
// later when the give-back sent at the failure worked), then after 250 ms,
// 500 ms, 1 s…, whatever became of each give-back, and is forgotten
// one lease after it was remembered; one give-back runs at a time, from the
// lowest bound of the tokens it carries; the memory is bounded.
func TestOrphanedClaimsSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var c orphanedClaims
	tok := uuid.New()
	c.add(tok, t0.Add(-time.Minute), 4*time.Second, t0, false)
	var times []time.Duration
	for step := t0; step.Before(t0.Add(10 * time.Second)); step = step.Add(10 * time.Millisecond) {
		if got, _ := c.take(step); len(got) == 1 {
			times = append(times, step.Sub(t0))
			c.done()
		}
	}
	require.Equal(t, []time.Duration{0, 250 * time.Millisecond, 750 * time.Millisecond, 1750 * time.Millisecond, 3750 * time.Millisecond}, times,
		"at once, then doubling waits, until one lease after it was remembered")
	require.Empty(t, c.claims, "forgotten after the lease")

	// Given back at once already: the same schedule from its second step.
	c.add(tok, t0.Add(-time.Minute), 4*time.Second, t0, true)
	times = nil
	for step := t0; step.Before(t0.Add(10 * time.Second)); step = step.Add(10 * time.Millisecond) {
		if got, _ := c.take(step); len(got) == 1 {
			times = append(times, step.Sub(t0))
			c.done()
		}
	}
	require.Equal(t, []time.Duration{250 * time.Millisecond, 750 * time.Millisecond, 1750 * time.Millisecond, 3750 * time.Millisecond}, times,
		"after 250 ms, then doubling waits")
	require.Empty(t, c.claims, "forgotten after the lease")

	early, late := uuid.New(), uuid.New()
	c.add(late, t0.Add(-time.Second), time.Minute, t0, false)
	c.add(early, t0.Add(-time.Hour), time.Minute, t0, false)
	got, from := c.take(t0)
	require.ElementsMatch(t, []uuid.UUID{early, late}, got)
	require.Equal(t, t0.Add(-time.Hour), from, "the lowest bound of the tokens given back")
	c.add(uuid.New(), time.Time{}, time.Minute, t0, false)
	none, _ := c.take(t0.Add(time.Second))
	require.Empty(t, none, "nothing while a give-back is in flight")
	c.done()
	require.Len(t, func() []uuid.UUID { g, _ := c.take(t0.Add(time.Second)); return g }(), 3)
	c.done()

	for i := 0; i < maxOrphanedClaims+10; i++ {
		c.add(uuid.New(), time.Time{}, time.Minute, t0, false)
	}
	require.Len(t, c.claims, maxOrphanedClaims)
}

// TestMayHaveRun: only a claim that never left the client, or that the
// server ended with an error, cannot have leased rows.
func TestMayHaveRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"timed out waiting for the answer", fmt.Errorf("claim: %w", context.DeadlineExceeded), true},
		{"connection lost", io.ErrUnexpectedEOF, true},
		{"rows not scanned (the statement ran)", errors.New("can't scan into dest[0]"), true},
		{"never sent", &pgconn.ConnectError{}, false},
		{"ended by the server", &pgconn.PgError{Severity: "ERROR", Code: "55P03"}, false},
		{"cancelled on the server", fmt.Errorf("claim: %w", &pgconn.PgError{Severity: "ERROR", Code: "57014"}), false},
		{"backend terminated, perhaps after the commit", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		// A server with lc_messages=ru_RU translates the severity; only
		// the unlocalized one (PostgreSQL 9.6+) tells.
		{"backend terminated, the severity in Russian", &pgconn.PgError{Severity: "ВАЖНО", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{"ended by the server, the severity in Russian", &pgconn.PgError{Severity: "ОШИБКА", SeverityUnlocalized: "ERROR", Code: "55P03"}, false},
	} {
		require.Equal(t, tc.want, mayHaveRun(tc.err), tc.name)
		if pgErr, ok := tc.err.(*pgconn.PgError); ok {
			// The connection is closed after exactly the errors that
			// ended the session (pgconn's OnPgError).
			require.Equal(t, tc.want, !closeOnFatal(nil, pgErr), "closeOnFatal: %s", tc.name)
		}
	}
}
