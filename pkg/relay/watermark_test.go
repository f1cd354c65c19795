package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/testenv"
)

// fakeBounded is a fakeOutbox that answers the watermark's queries: floors
// are served in order, and every call is recorded.
type fakeBounded struct {
	fakeOutbox
	mu      sync.Mutex
	floors  []time.Time // next answers of PendingFloor; the last one repeats
	err     error
	failing int         // ClaimFrom calls still to fail
	slow    bool        // PendingFloor waits for its context to end
	asked   []time.Time // from of each PendingFloor
	claimed []time.Time // from of each ClaimFrom
}

func (f *fakeBounded) ClaimFrom(_ context.Context, from time.Time, _ int, _ int64, _ time.Duration) ([]outbox.Row, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimed = append(f.claimed, from)
	if f.failing > 0 {
		f.failing--
		return nil, false, errors.New("connection reset")
	}
	return nil, false, nil
}

func (f *fakeBounded) PendingFloor(ctx context.Context, from time.Time, _ time.Duration) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, from)
	if f.slow {
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return time.Time{}, ctx.Err()
	}
	if f.err != nil {
		return time.Time{}, f.err
	}
	v := f.floors[0]
	if len(f.floors) > 1 {
		f.floors = f.floors[1:]
	}
	return v, nil
}

func (f *fakeBounded) last() (asked, claimed time.Time, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[len(f.asked)-1], f.claimed[len(f.claimed)-1], len(f.asked)
}

// TestWatermark: the first refresh reads W from the start of the index;
// advances read from W and only move it up; the full rescan reads from the
// start again and may move it down; a failed read keeps the W known and is
// not tried again before its time; without a W, claims read the whole
// index.
func TestWatermark(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fakeBounded{floors: []time.Time{t0, t0.Add(-time.Minute), t0.Add(time.Minute), t0.Add(-time.Hour)}}
	o, m := withWatermark(f, Config{ClaimFullScanInterval: time.Second}.WithDefaults())
	m.advance = 100 * time.Millisecond
	// claim refreshes W when due, as the relay does before each claim, and
	// claims.
	claim := func() error {
		_, _, err := m.refresh(ctx)
		if _, _, cerr := o.Claim(ctx, 10, 0, time.Minute); cerr != nil {
			t.Fatal(cerr)
		}
		return err
	}

	require.NoError(t, claim())
	asked, claimed, n := f.last()
	require.True(t, asked.IsZero(), "the first W is read from the start")
	require.Equal(t, t0, claimed)
	require.NoError(t, claim())
	_, claimed, n2 := f.last()
	require.Equal(t, n, n2, "no read before the advance is due")
	require.Equal(t, t0, claimed)

	time.Sleep(150 * time.Millisecond) // advance: answer t0−1m, W stays
	require.NoError(t, claim())
	asked, claimed, _ = f.last()
	require.Equal(t, t0, asked, "advances read from W")
	require.Equal(t, t0, claimed, "an advance never lowers W")

	time.Sleep(150 * time.Millisecond) // advance: t0+1m
	require.NoError(t, claim())
	_, claimed, _ = f.last()
	require.Equal(t, t0.Add(time.Minute), claimed)

	time.Sleep(800 * time.Millisecond) // full rescan due: t0−1h
	require.NoError(t, claim())
	asked, claimed, _ = f.last()
	require.True(t, asked.IsZero(), "the full rescan reads from the start")
	require.Equal(t, t0.Add(-time.Hour), claimed, "the full rescan lowers W to a row below it")

	f.err = errors.New("down")
	time.Sleep(1100 * time.Millisecond)
	require.Error(t, claim(), "the full rescan failed")
	_, claimed, n = f.last()
	require.Equal(t, t0.Add(-time.Hour), claimed, "a known W keeps serving")
	time.Sleep(150 * time.Millisecond)
	require.Error(t, claim(), "the advance failed")
	_, _, n2 = f.last()
	require.Equal(t, n+1, n2)
	if due, full := m.due(); due && full {
		t.Fatal("a failed full rescan is due again at once")
	}

	fresh := &fakeBounded{err: errors.New("down")}
	fo, fm := withWatermark(fresh, Config{}.WithDefaults())
	_, _, err := fm.refresh(ctx)
	require.Error(t, err)
	_, _, err = fo.Claim(ctx, 10, 0, time.Minute)
	require.NoError(t, err)
	_, claimed, _ = fresh.last()
	require.True(t, claimed.IsZero(), "no W known: the claim reads the whole index")
	due, _ := fm.due()
	require.False(t, due, "no W known: the next full rescan waits for its interval")

	same, none := withWatermark(f, Config{ClaimFullScanInterval: -1}.WithDefaults())
	require.Same(t, f, same, "negative interval: no watermark")
	require.Nil(t, none)
	var plain Outbox = &fakeOutbox{}
	same, none = withWatermark(plain, Config{}.WithDefaults())
	require.Same(t, plain, same, "an outbox without bounded claims is claimed as before")
	require.Nil(t, none)
}

// TestRefreshWatermarkSlowFullRescan: a full rescan that runs out of its
// bound (the lease) while the database answers is logged once, claims go
// on from the W known, and the next full rescan waits nine times as long;
// the one that succeeds logs the recovery.
func TestRefreshWatermarkSlowFullRescan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fakeBounded{floors: []time.Time{t0, t0}}
	var logs testenv.SyncBuffer
	r, err := New(slog.New(slog.NewTextHandler(&logs, nil)), f, &fakePublisher{},
		Config{LockTimeout: time.Second, PublishTimeout: 500 * time.Millisecond, ClaimFullScanInterval: 100 * time.Millisecond,
			DBTimeout: 200 * time.Millisecond}) // the watch probes every 100 ms: answers before the bound
	require.NoError(t, err)
	r.claimsHealthy.Store(true)
	const warning = "claim watermark's full rescan of the PENDING index ran out of its time"

	r.refreshWatermark(ctx)
	require.True(t, r.watermark.known())
	f.mu.Lock()
	f.slow = true
	f.mu.Unlock()
	for range 2 {
		r.watermark.mu.Lock()
		r.watermark.nextAll = time.Now() // a full rescan due
		r.watermark.mu.Unlock()
		start := time.Now()
		r.refreshWatermark(ctx)
		require.GreaterOrEqual(t, time.Since(start), time.Second, "bounded by the lease")
		if due, full := r.watermark.due(); full {
			t.Fatalf("the next full rescan is due at once (due %v)", due)
		}
		_, _, err := r.outbox.Claim(ctx, 10, 0, time.Minute)
		require.NoError(t, err)
		_, claimed, _ := f.last()
		require.Equal(t, t0, claimed, "claims go on from the W known")
	}
	require.Equal(t, 1, strings.Count(logs.String(), warning), "logged once:\n%s", logs.String())

	f.mu.Lock()
	f.slow = false
	f.mu.Unlock()
	r.watermark.mu.Lock()
	r.watermark.nextAll = time.Now()
	r.watermark.mu.Unlock()
	r.refreshWatermark(ctx)
	require.Contains(t, logs.String(), "claim watermark's full rescan succeeded again")
}

// TestWatermarkRescansAfterDatabaseFailure: a failover can lose a mark the
// old primary acknowledged, which puts its row back to PENDING below W.
// After claims fail and work again, the next full rescan comes at once,
// not a ClaimFullScanInterval later, and lowers W to that row.
func TestWatermarkRescansAfterDatabaseFailure(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lost := t0.Add(-time.Hour) // the next_attempt_at of the row whose mark was lost
	f := &fakeBounded{floors: []time.Time{t0, lost}, failing: 1}
	r := newTestRelay(t, f, &fakePublisher{}, Config{PollInterval: 100 * time.Millisecond, ClaimFullScanInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.claimed) > 0 && f.claimed[len(f.claimed)-1].Equal(lost)
	}, 5*time.Second, 10*time.Millisecond, "no claim reached the row whose mark was lost")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.True(t, f.claimed[0].Equal(t0), "the first claim, which failed, ran from the first W: %v", f.claimed)
	fulls := 0
	for _, from := range f.asked {
		if from.IsZero() {
			fulls++
		}
	}
	require.Equal(t, 2, fulls, "the first full rescan, and the one after the failure: %v", f.asked)

	// Without a W a failure does not bring the rescan forward: claims
	// read the whole index, and the refresh waits for its interval.
	fresh := &fakeBounded{err: errors.New("down")}
	_, fm := withWatermark(fresh, Config{}.WithDefaults())
	_, _, err := fm.refresh(context.Background())
	require.Error(t, err)
	fm.rescanSoon()
	due, _ := fm.due()
	require.False(t, due, "no W known: the next full rescan waits for its interval")
}
