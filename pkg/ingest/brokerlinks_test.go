package ingest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

// TestNotReadyWhileThePartitionsLeaderIsUnreachable: a broker answers the
// probes, but the leader of the input partition does not. Nothing can be
// consumed, so /readyz says so, naming the partition and its leader, once
// that has lasted the grace; it is 200 again once the leader answers.
func TestNotReadyWhileThePartitionsLeaderIsUnreachable(t *testing.T) {
	t.Parallel()
	notReadyWhileCutOff(t, 1, 0, "links-in[0]: its leader, broker 1, is not reachable")
}

// TestNotReadyWhileTheGroupsCoordinatorIsUnreachable: as above, with the
// group's coordinator cut off instead.
func TestNotReadyWhileTheGroupsCoordinatorIsUnreachable(t *testing.T) {
	t.Parallel()
	notReadyWhileCutOff(t, 0, 1, "the consumer group's coordinator is not reachable")
}

// notReadyWhileCutOff runs an ingestor on testenv.TwoBrokers (its topics
// led by leader, its group coordinated by coordinator), cuts broker 1 off,
// and waits for /readyz to say want, then for it to be 200 again once
// broker 1 answers.
func notReadyWhileCutOff(t *testing.T, leader, coordinator int32, want string) {
	t.Helper()
	b := setup(t, 1, "")
	b.topic, b.dlqTopic = "links-in", "links-dlq"
	bootstrap, group, down := testenv.TwoBrokers(t, map[string]int32{b.topic: leader, b.dlqTopic: leader}, coordinator)
	b.bootstrap, b.group = bootstrap, group
	b.dlqAt(t, bootstrap, 10*time.Second)
	r := b.start(t)
	b.warmUp(t, r, 3)

	down.Store(true)
	cut := time.Now()
	// A metadata probe that goes to broker 1 times out, and says so
	// meanwhile: not ready as well, for another reason.
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = r.readyzBody(t)
		return code != http.StatusOK && strings.Contains(body, want)
	}, 30*time.Second, 100*time.Millisecond, "/readyz did not say %q while broker 1 was cut off; last: %s", want, body)
	t.Logf("figures: not ready, naming it, %.1fs after broker 1 was cut off: %s", time.Since(cut).Seconds(), body)

	down.Store(false)
	back := time.Now()
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 15*time.Second, 100*time.Millisecond)
	t.Logf("figures: ready %.1fs after broker 1 answered again", time.Since(back).Seconds())
	require.NoError(t, r.stop(t))
}
