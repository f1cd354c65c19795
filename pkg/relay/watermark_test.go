package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
)

// fakeBounded is a fakeOutbox that answers the watermark's queries: floors
// are served in order, and every call is recorded.
type fakeBounded struct {
	fakeOutbox
	mu      sync.Mutex
	floors  []time.Time // next answers of PendingFloor
	err     error
	asked   []time.Time // from of each PendingFloor
	claimed []time.Time // from of each ClaimFrom
}

func (f *fakeBounded) ClaimFrom(_ context.Context, from time.Time, _ int, _ int64, _ time.Duration) ([]outbox.Row, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimed = append(f.claimed, from)
	return nil, false, nil
}

func (f *fakeBounded) PendingFloor(_ context.Context, from time.Time, _ time.Duration) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, from)
	if f.err != nil {
		return time.Time{}, f.err
	}
	v := f.floors[0]
	f.floors = f.floors[1:]
	return v, nil
}

func (f *fakeBounded) last() (asked, claimed time.Time, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[len(f.asked)-1], f.claimed[len(f.claimed)-1], len(f.asked)
}

// TestWatermark: the first claim reads W from the start of the index;
// advances read from W and only move it up; the full rescan reads from the
// start again and may move it down; a failed read keeps the W known.
func TestWatermark(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fakeBounded{floors: []time.Time{t0, t0.Add(-time.Minute), t0.Add(time.Minute), t0.Add(-time.Hour)}}
	o := withWatermark(f, Config{ClaimFullScanInterval: time.Second}.WithDefaults())
	m := o.(*watermarked)
	m.advance = 100 * time.Millisecond

	_, _, err := o.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	asked, claimed, n := f.last()
	require.True(t, asked.IsZero(), "the first W is read from the start")
	require.Equal(t, t0, claimed)
	_, _, err = o.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	_, claimed, n2 := f.last()
	require.Equal(t, n, n2, "no read before the advance is due")
	require.Equal(t, t0, claimed)

	time.Sleep(150 * time.Millisecond) // advance: answer t0−1m, W stays
	_, _, err = o.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	asked, claimed, _ = f.last()
	require.Equal(t, t0, asked, "advances read from W")
	require.Equal(t, t0, claimed, "an advance never lowers W")

	time.Sleep(150 * time.Millisecond) // advance: t0+1m
	_, _, err = o.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	_, claimed, _ = f.last()
	require.Equal(t, t0.Add(time.Minute), claimed)

	time.Sleep(800 * time.Millisecond) // full rescan due: t0−1h
	_, _, err = o.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	asked, claimed, _ = f.last()
	require.True(t, asked.IsZero(), "the full rescan reads from the start")
	require.Equal(t, t0.Add(-time.Hour), claimed, "the full rescan lowers W to a row below it")

	f.err = errors.New("down")
	time.Sleep(1100 * time.Millisecond)
	_, _, err = o.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err, "a known W keeps serving")
	_, claimed, _ = f.last()
	require.Equal(t, t0.Add(-time.Hour), claimed)

	fresh := withWatermark(&fakeBounded{err: errors.New("down")}, Config{}.WithDefaults())
	_, _, err = fresh.Claim(ctx, 10, 0, time.Minute)
	require.Error(t, err, "no W known: the claim fails")

	require.Same(t, f, withWatermark(f, Config{ClaimFullScanInterval: -1}.WithDefaults()), "negative interval: no watermark")
	var plain Outbox = &fakeOutbox{}
	require.Same(t, plain, withWatermark(plain, Config{}.WithDefaults()), "an outbox without bounded claims is claimed as before")
}
