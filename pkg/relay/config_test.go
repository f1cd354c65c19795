package relay

import (
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/relay/relaytest"
)

// relaytest writes rows with the relay's default max_attempts (both take
// outbox.DefaultMaxAttempts).
func TestRelaytestWritesTheDefaultMaxAttempts(t *testing.T) {
	t.Parallel()
	if got, want := relaytest.DefaultMaxAttempts, (Config{}).WithDefaults().MaxAttempts; got != want {
		t.Fatalf("relaytest.DefaultMaxAttempts = %d, the relay's default is %d", got, want)
	}
}

// The database retries' backoff keeps under ProbeMaxBackoff even when that
// is below the usual 100-ms start: backoff.New raised the cap to the start,
// so OUTBOX_PROBE_MAX_BACKOFF=10ms waited 100 ms and more.
func TestDBRetryBackoffKeepsItsCap(t *testing.T) {
	t.Parallel()
	for _, maxWait := range []time.Duration{10 * time.Millisecond, 500 * time.Millisecond} {
		bo := Config{ProbeMaxBackoff: maxWait}.dbRetryBackoff()
		for i := range 20 {
			if d := bo.Next(); d > maxWait {
				t.Fatalf("ProbeMaxBackoff %s: wait %d was %s", maxWait, i+1, d)
			}
		}
	}
}
