package store

import (
	"context"
	"fmt"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
)

// conflictRetries is how many times a transaction that lost a race with a
// concurrent one (KindConflict) is run again before its error is returned,
// each after a pause of the shared backoff (equal jitter: between half
// and all of 1 ms, doubling up to conflictMaxPause; at most 31 ms
// over the five). The relay's callers run again at read committed, where a
// serialization failure cannot recur; a deadlock can, rarely (Requeue runs
// at the server's default isolation: a deadlock, or under a serializable
// default a serialization failure, is what it meets).
const conflictRetries = 5

// conflictMaxPause bounds one pause between runs.
const conflictMaxPause = 32 * time.Millisecond

// retryConflicts runs fn, and again while it fails as KindConflict, at most
// conflictRetries more times. fn must be a whole transaction (a single
// statement, or a pipeline committed as one): PostgreSQL has rolled a
// conflicting one back, so running it again writes nothing twice.
func retryConflicts(ctx context.Context, fn func() error) error {
	pauses := backoff.New(time.Millisecond, conflictMaxPause)
	for i := 0; ; i++ {
		err := fn()
		if i == conflictRetries || Classify(err) != KindConflict {
			return err
		}
		if !backoff.Sleep(ctx, pauses.Next()) {
			// ctx's error for the caller's Classify and TimedOut: a
			// deadline that passed is a timeout and a cancel a stop,
			// not a conflict to run again. %v, not %w: wrapped, the
			// server's 40001 would make it KindConflict.
			return fmt.Errorf("%w (after a conflict: %v)", ctx.Err(), err)
		}
	}
}
