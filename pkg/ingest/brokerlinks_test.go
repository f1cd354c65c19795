package ingest_test

import (
	"net/http"
	"strings"
	"sync/atomic"
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
	r, down := startOnTwoBrokers(t, leader, coordinator, testenv.DropRequests)
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

// TestNotReadyWhileThePartitionsLeaderIsSilent: as
// TestNotReadyWhileThePartitionsLeaderIsUnreachable, with the leader's
// link holding every request instead of resetting: its connection stays up
// until librdkafka's 60-s request timeout.
func TestNotReadyWhileThePartitionsLeaderIsSilent(t *testing.T) {
	t.Parallel()
	notReadyWhileSilent(t, 1, 0, "links-in[0]: its leader, broker 1,")
}

// TestNotReadyWhileTheGroupsCoordinatorIsSilent: the same with the
// group's coordinator silent; librdkafka's group state stays "up"
// throughout.
func TestNotReadyWhileTheGroupsCoordinatorIsSilent(t *testing.T) {
	t.Parallel()
	notReadyWhileSilent(t, 0, 1, "the consumer group's coordinator")
}

// notReadyWhileSilent runs an ingestor on testenv.TwoBrokers whose
// broker 1 holds every request, and watches /readyz for 45 s: it must name
// want within 20 s and, from then on, stay not ready (a moment's 200 while
// the reasons change hands is allowed, a tenth of the samples); then 200
// again once broker 1 answers. A probe that happens to go to broker 1
// times out and turns it not ready sooner, for that reason, until a probe
// goes to broker 0. Before the silence was read from the statistics, the
// silent leader was named after 72 s, /readyz 200 for the 33 s before, and
// the silent coordinator never.
func notReadyWhileSilent(t *testing.T, leader, coordinator int32, want string) {
	t.Helper()
	r, down := startOnTwoBrokers(t, leader, coordinator, testenv.HoldRequests)
	down.Store(true)
	cut := time.Now()
	var firstDown, namedAt time.Duration
	named, samples, readyAfter := "", 0, 0
	for time.Since(cut) < 45*time.Second {
		code, body := r.readyzBody(t)
		at := time.Since(cut)
		if code != http.StatusOK && firstDown == 0 {
			firstDown = at
		}
		if named == "" && strings.Contains(body, want) {
			named, namedAt = body, at
		}
		if namedAt > 0 {
			samples++
			if code == http.StatusOK {
				readyAfter++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("figures: first not ready %.1fs after broker 1 fell silent; named at %.1fs (%s); ready in %d of %d samples after", firstDown.Seconds(), namedAt.Seconds(), named, readyAfter, samples)
	require.NotEmpty(t, named, "/readyz never said %q in 45 s while broker 1 held every request", want)
	require.LessOrEqual(t, namedAt, 20*time.Second, "/readyz said %q only %s after broker 1 fell silent", want, namedAt)
	require.LessOrEqual(t, readyAfter*10, samples, "/readyz 200 in %d of %d samples after it named the silence, broker 1 still silent", readyAfter, samples)

	down.Store(false)
	back := time.Now()
	require.Eventually(t, func() bool { return r.readyz(t) == http.StatusOK }, 15*time.Second, 100*time.Millisecond)
	t.Logf("figures: ready %.1fs after broker 1 answered again", time.Since(back).Seconds())
	require.NoError(t, r.stop(t))
}

// startOnTwoBrokers runs a warmed-up ingestor on testenv.TwoBrokers, its
// topics led by leader and its group coordinated by coordinator, and
// returns it with the switch that cuts broker 1 off by fault.
func startOnTwoBrokers(t *testing.T, leader, coordinator int32, fault testenv.LinkFault) (*running, *atomic.Bool) {
	t.Helper()
	b := setup(t, 1, "")
	b.topic, b.dlqTopic = "links-in", "links-dlq"
	bootstrap, group, down := testenv.TwoBrokers(t, map[string]int32{b.topic: leader, b.dlqTopic: leader}, coordinator, fault)
	b.bootstrap, b.group = bootstrap, group
	b.dlqAt(t, bootstrap, 10*time.Second)
	r := b.start(t)
	b.warmUp(t, r, 3)
	return r, down
}
