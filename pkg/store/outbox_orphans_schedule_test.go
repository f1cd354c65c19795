package store

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestOrphanedClaimsSchedule: a remembered token is due at once, then after
// 250 ms, 500 ms, 1 s…, whatever became of each give-back, and is forgotten
// one lease after it was remembered; one give-back runs at a time, from the
// lowest bound of the tokens it carries; the memory is bounded.
func TestOrphanedClaimsSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var c orphanedClaims
	tok := uuid.New()
	c.add(tok, t0.Add(-time.Minute), 4*time.Second, t0)
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

	early, late := uuid.New(), uuid.New()
	c.add(late, t0.Add(-time.Second), time.Minute, t0)
	c.add(early, t0.Add(-time.Hour), time.Minute, t0)
	got, from := c.take(t0)
	require.ElementsMatch(t, []uuid.UUID{early, late}, got)
	require.Equal(t, t0.Add(-time.Hour), from, "the lowest bound of the tokens given back")
	c.add(uuid.New(), time.Time{}, time.Minute, t0)
	none, _ := c.take(t0.Add(time.Second))
	require.Empty(t, none, "nothing while a give-back is in flight")
	c.done()
	require.Len(t, func() []uuid.UUID { g, _ := c.take(t0.Add(time.Second)); return g }(), 3)
	c.done()

	for i := 0; i < maxOrphanedClaims+10; i++ {
		c.add(uuid.New(), time.Time{}, time.Minute, t0)
	}
	require.Len(t, c.claims, maxOrphanedClaims)
}
