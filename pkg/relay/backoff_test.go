package relay

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		name             string
		attempts         int
		initial, max     time.Duration
		jitter, r        float64
		want             time.Duration
		wantMin, wantMax time.Duration
	}{
		{name: "first", attempts: 1, initial: s, max: 60 * s, want: s},
		{name: "second doubles", attempts: 2, initial: s, max: 60 * s, want: 2 * s},
		{name: "sixth", attempts: 6, initial: s, max: 60 * s, want: 32 * s},
		{name: "seventh caps", attempts: 7, initial: s, max: 60 * s, want: 60 * s},
		{name: "huge attempts cap without overflow", attempts: math.MaxInt, initial: s, max: 60 * s, want: 60 * s},
		{name: "zero attempts count as one", attempts: 0, initial: s, max: 60 * s, want: s},
		{name: "negative attempts count as one", attempts: -5, initial: s, max: 60 * s, want: s},
		{name: "initial above max", attempts: 1, initial: 90 * s, max: 60 * s, want: 60 * s},
		{name: "zero initial", attempts: 3, initial: 0, max: 60 * s, want: 0},
		{name: "max duration", attempts: 80, initial: s, max: math.MaxInt64, want: math.MaxInt64},
		{name: "full jitter", attempts: 2, initial: s, max: 60 * s, jitter: 0.1, r: 0.999999, wantMin: 2 * s, wantMax: 2200 * time.Millisecond},
		{name: "half jitter", attempts: 1, initial: s, max: 60 * s, jitter: 0.5, r: 0.5, want: 1250 * time.Millisecond},
		{name: "jitter takes off at the cap", attempts: 30, initial: s, max: 60 * s, jitter: 0.1, r: 0.5, want: 57 * s},
		{name: "jitter up to the cap", attempts: 6, initial: s, max: 34 * s, jitter: 0.1, r: 0.9, want: 34 * s},
		{name: "jitter clamped", attempts: 1, initial: s, max: 60 * s, jitter: 7, r: 0.5, want: 1500 * time.Millisecond},
		{name: "NaN ignored", attempts: 1, initial: s, max: 60 * s, jitter: math.NaN(), r: math.NaN(), want: s},
		{name: "jitter near MaxInt64", attempts: 1, initial: math.MaxInt64, max: math.MaxInt64, jitter: 1, r: 0.99, want: math.MaxInt64},
		{name: "initial above max, jitter", attempts: 1, initial: 90 * s, max: 60 * s, jitter: 0.1, r: 0.5, want: 57 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Backoff(tt.attempts, tt.initial, tt.max, tt.jitter, tt.r)
			if tt.wantMax > 0 {
				require.GreaterOrEqual(t, got, tt.wantMin)
				require.LessOrEqual(t, got, tt.wantMax)
				return
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzBackoff(f *testing.F) {
	f.Add(1, int64(time.Second), int64(time.Minute), 0.1, 0.5)
	f.Add(7, int64(time.Second), int64(time.Minute), 0.1, 0.99)
	f.Add(0, int64(0), int64(0), 0.0, 0.0)
	f.Add(-3, int64(-1), int64(time.Minute), -1.0, 2.0)
	f.Add(63, int64(math.MaxInt64), int64(math.MaxInt64), 1.0, 0.999)
	f.Fuzz(func(t *testing.T, attempts int, initial, maxD int64, jitter, r float64) {
		in, mx := time.Duration(initial), time.Duration(maxD)
		got := Backoff(attempts, in, mx, jitter, r)
		if got < 0 {
			t.Fatalf("negative: %v", got)
		}
		plain := Backoff(attempts, in, mx, 0, 0)
		if plain > max(mx, 0) {
			t.Fatalf("%v above the cap %v", plain, mx)
		}
		if got > max(mx, 0) {
			t.Fatalf("%v above the cap %v", got, mx)
		}
		j := clamp(jitter, 0, 1)
		switch {
		case plain < mx && float64(got) > float64(plain)*(1+j)+1:
			t.Fatalf("%v above %v plus its jitter", got, plain)
		case plain < mx && got < plain:
			t.Fatalf("jitter subtracted below the cap: %v < %v", got, plain)
		case plain == mx && float64(got) < float64(mx)*(1-j)-1:
			t.Fatalf("%v more than the jitter below the cap %v", got, mx)
		}
		if attempts < math.MaxInt {
			if next := Backoff(attempts+1, in, mx, 0, 0); next < plain {
				t.Fatalf("not monotone: attempts %d → %v, %d → %v", attempts, plain, attempts+1, next)
			}
		}
	})
}
