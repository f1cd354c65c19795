package relay

import (
	"testing"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
)

// relaytest writes rows with the relay's default max_attempts, which it
// states itself because it cannot import this package.
func TestRelaytestWritesTheDefaultMaxAttempts(t *testing.T) {
	t.Parallel()
	if got, want := relaytest.DefaultMaxAttempts, (Config{}).WithDefaults().MaxAttempts; got != want {
		t.Fatalf("relaytest.DefaultMaxAttempts = %d, the relay's default is %d", got, want)
	}
}
