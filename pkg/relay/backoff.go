package relay

import "time"

// Backoff is the delay before the next publish of a row that has failed
// attempts times (attempts ≥ 1; smaller values count as 1). With d the
// capped exponential delay min(initial · 2^(attempts−1), max) and
// e = d · jitter · r:
//
//	d < max: min(d + e, max)
//	d = max: max − e
//
// jitter is the largest fraction (clamped to [0, 1]) and r a random number
// in [0, 1) (clamped). max is the cap of the delay (contract §5:
// OUTBOX_MAX_BACKOFF): below it the jitter only adds, so a row is never
// retried sooner than d; at it the jitter takes off instead, so that rows
// and relays that failed together do not retry in lock step there, after
// a long run of failures, any more than below. It never overflows and
// never returns a negative duration.
func Backoff(attempts int, initial, max time.Duration, jitter, r float64) time.Duration {
	d := capped(attempts, initial, max)
	if d <= 0 {
		return 0
	}
	jitter = clamp(jitter, 0, 1)
	r = clamp(r, 0, 1)
	extra := time.Duration(float64(d) * jitter * r)
	if extra < 0 || d+extra < d { // overflow guard for durations near MaxInt64
		return d
	}
	if d == max {
		return max - extra
	}
	return min(d+extra, max)
}

// capped is min(initial · 2^(attempts−1), max) without overflow.
func capped(attempts int, initial, max time.Duration) time.Duration {
	if initial <= 0 || max <= 0 {
		return 0
	}
	if initial >= max {
		return max
	}
	d := initial
	for i := 1; i < attempts; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	return min(d, max)
}

func clamp(v, lo, hi float64) float64 {
	switch {
	case v != v: // NaN
		return lo
	case v < lo:
		return lo
	case v > hi:
		return hi
	}
	return v
}
