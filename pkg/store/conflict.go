package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// conflictRetries is how many times a transaction that lost a race with a
// concurrent one (KindConflict) is run again before its error is returned,
// each after a jittered pause of up to 2^i ms (at most conflictMaxPause).
// The callers run again at read committed, where a serialization failure
// cannot recur; a deadlock can, rarely.
const conflictRetries = 5

// conflictMaxPause bounds one pause between runs.
const conflictMaxPause = 32 * time.Millisecond

// retryConflicts runs fn, and again while it fails as KindConflict, at most
// conflictRetries more times. fn must be a whole transaction (a single
// statement, or a pipeline committed as one): PostgreSQL has rolled a
// conflicting one back, so running it again writes nothing twice.
func retryConflicts(ctx context.Context, fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		if i == conflictRetries || Classify(err) != KindConflict {
			return err
		}
		pause := min(time.Millisecond<<i, conflictMaxPause)
		t := time.NewTimer(time.Duration(rand.Int64N(int64(pause))) + 1)
		select {
		case <-ctx.Done():
			t.Stop()
			// Canceled, not a conflict, for the caller's Classify.
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
