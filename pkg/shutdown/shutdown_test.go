package shutdown

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeTime is a settable clock.
type fakeTime struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeTime) now() time.Time      { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeTime) add(d time.Duration) { f.mu.Lock(); defer f.mu.Unlock(); f.t = f.t.Add(d) }

func TestLeft(t *testing.T) {
	t.Parallel()
	ft := &fakeTime{t: time.Unix(1_000, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	c := startAt(ctx, ft.now)

	// Before the signal every step has its own bound.
	ft.add(time.Hour)
	require.Equal(t, 20*time.Second, c.Left(20*time.Second))

	cancel()
	require.Eventually(t, func() bool { return c.began.Load() != 0 }, time.Second, time.Millisecond, "the clock starts when ctx ends")
	require.Equal(t, 5*time.Second, c.Left(5*time.Second), "a step inside the budget keeps its bound")

	// Steps that each time out in turn: 20 s + 5 s leave 3 s of the 28 s.
	ft.add(25 * time.Second)
	require.Equal(t, 3*time.Second, c.Left(5*time.Second))
	require.Equal(t, 2*time.Second, c.Left(2*time.Second))
	ft.add(10 * time.Second)
	require.Zero(t, c.Left(5*time.Second), "nothing left: no wait, never negative")

	// Summed over a stop in which every step takes its whole grant, the
	// stop ends inside Limit.
	ft2 := &fakeTime{t: time.Unix(5_000, 0)}
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2 := startAt(ctx2, ft2.now)
	cancel2()
	require.Eventually(t, func() bool { return c2.began.Load() != 0 }, time.Second, time.Millisecond)
	start := ft2.now()
	for _, step := range []time.Duration{20 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 2 * time.Second, 5 * time.Second} {
		ft2.add(c2.Left(step))
	}
	require.LessOrEqual(t, ft2.now().Sub(start), Limit)
	require.Equal(t, budget, ft2.now().Sub(start))
}
