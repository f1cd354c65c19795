package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
)

// hangingOutbox is a database that never answers a claim; its probe
// (Stuck) answers when answers is set, and otherwise hangs too.
type hangingOutbox struct {
	fakeOutbox
	answers bool
}

func (h *hangingOutbox) Claim(ctx context.Context, _ int, _ int64, _ time.Duration) ([]outbox.Row, bool, error) {
	<-ctx.Done()
	return nil, false, ctx.Err()
}

func (h *hangingOutbox) Stuck(ctx context.Context) error {
	if h.answers {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// A claim that runs out of its bound while the database answers probes was
// slow, and the next claim gets twice the bound; one lost in a blackhole
// (no probe answered) was not, and the bound stays DBTimeout. Lost claims
// were counted as slow ones (a lost claim's deadline and its probe's
// verdict both come DBTimeout in), so a long blackhole stretched the bound
// to the full claim bound, which a claim left hanging on a dead connection
// after the heal then waited out.
func TestClaimBoundGrowsOnlyForSlowClaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answers bool
		want    int32
	}{{"lost", false, 0}, {"slow", true, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRelay(t, &hangingOutbox{answers: tc.answers}, &fakePublisher{}, Config{DBTimeout: 200 * time.Millisecond})
			for range 3 {
				_, _, _, _, err := r.claim(context.Background())
				require.Error(t, err)
			}
			require.Equal(t, tc.want, r.claimsTimedOut.Load(), "claims counted as slow")
		})
	}
}
