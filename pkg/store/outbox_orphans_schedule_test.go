package store

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestOrphanedClaimsSchedule: a remembered token is due at once, again
// after 250 ms, 500 ms, 1 s… once a give-back reached the database, and is
// forgotten one lease after the first that did; a give-back that failed
// leaves it due after the same wait; the memory is bounded.
func TestOrphanedClaimsSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var c orphanedClaims
	tok := uuid.New()
	c.add(tok, 4*time.Second, t0)
	require.Equal(t, []uuid.UUID{tok}, c.due(t0), "due at once")
	require.Empty(t, c.due(t0), "not handed out twice")
	// That give-back failed: due again after the first wait.
	require.Empty(t, c.due(t0.Add(200*time.Millisecond)))
	now := t0.Add(250 * time.Millisecond)
	require.Equal(t, []uuid.UUID{tok}, c.due(now))
	c.answered([]uuid.UUID{tok}, now) // reached the database: forget it at now + 4 s
	var times []time.Duration
	for step := now; step.Before(now.Add(10 * time.Second)); step = step.Add(10 * time.Millisecond) {
		if got := c.due(step); len(got) == 1 {
			times = append(times, step.Sub(now))
			c.answered(got, step)
		}
	}
	require.Equal(t, []time.Duration{250 * time.Millisecond, 750 * time.Millisecond, 1750 * time.Millisecond, 3750 * time.Millisecond}, times,
		"doubling waits until one lease after the first answer")
	require.Zero(t, c.pending(), "forgotten after the lease")

	for i := 0; i < maxOrphanedClaims+10; i++ {
		c.add(uuid.New(), time.Minute, t0)
	}
	require.Equal(t, maxOrphanedClaims, c.pending())
}
