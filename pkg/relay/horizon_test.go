package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A holder is dated from its first sighting, keeps that date while it is
// seen, and is forgotten once it is not: the same key seen again later is
// a new holder.
func TestUndatedHoldersAge(t *testing.T) {
	t.Parallel()
	var u undatedHolders
	t0 := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	require.Zero(t, u.age(nil, t0))
	require.Zero(t, u.age([]string{"10:700"}, t0))
	require.Equal(t, 5*time.Second, u.age([]string{"10:700", "11:705"}, t0.Add(5*time.Second)))
	require.Equal(t, 10*time.Second, u.age([]string{"11:705", "10:700"}, t0.Add(10*time.Second)))
	require.Equal(t, 10*time.Second, u.age([]string{"11:705"}, t0.Add(15*time.Second)), "10:700 ended")
	require.Zero(t, u.age([]string{"10:700"}, t0.Add(20*time.Second)), "10:700 again is new")
	require.Equal(t, 5*time.Second, u.age([]string{"10:700"}, t0.Add(25*time.Second)))
	require.Zero(t, u.age(nil, t0.Add(30*time.Second)))
}
