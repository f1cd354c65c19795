package store

import (
	"context"
	"maps"
	"slices"

	"github.com/google/uuid"
)

// The statements, for plan tests.
const (
	ClaimSQL           = claimSQL
	ReleaseTokensSQL   = releaseTokensSQL
	DeletePublishedSQL = deletePublishedSQL
	MarkPublishedSQL   = markPublishedSQL
	RetrySQL           = retrySQL
	ReleaseSQL         = releaseSQL
	PostponeSQL        = postponeSQL
)

// RememberedClaims returns the tokens of the failed claims o will give back
// again (orphanedClaims): the test stands in for a claim statement that ran
// on the server after its client gave up, which it cannot stage reliably.
func RememberedClaims(o *Outbox) []uuid.UUID {
	o.orphans.mu.Lock()
	defer o.orphans.mu.Unlock()
	return slices.Collect(maps.Keys(o.orphans.claims))
}

// RetryConflicts is retryConflicts, for its test with a conflict on cue.
func RetryConflicts(ctx context.Context, fn func() error) error { return retryConflicts(ctx, fn) }
