// Package backoff is the one capped exponential backoff that the service's
// retry and probe loops share. (The relay's per-row retry delay is not a
// loop's backoff: it is contract §5's formula, stored with the row, and lives
// in relay.)
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields waits that double from Min up to Max. Each wait is drawn
// from [d/2, d] ("equal jitter"), so loops that failed together do not retry
// in lock step, and none waits less than half the nominal delay. The zero
// value waits 0 every time. A Backoff is not safe for concurrent use.
type Backoff struct {
	min, max, cur time.Duration
}

// New returns a Backoff starting at minD and capped at maxD (maxD < minD is
// taken as minD).
func New(minD, maxD time.Duration) *Backoff {
	maxD = max(maxD, minD)
	return &Backoff{min: minD, max: maxD, cur: minD}
}

// Next returns the next wait and doubles the nominal delay.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	if b.cur < b.max/2 {
		b.cur *= 2
	} else {
		b.cur = b.max
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}

// Reset starts the sequence again at the minimum: call it after a success.
func (b *Backoff) Reset() { b.cur = b.min }

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
