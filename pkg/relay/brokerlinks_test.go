package relay_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestNotReadyWhileAPartitionsLeaderIsUnreachable: the link to one broker
// drops every request while the other answers the probes. Rows for the
// partition that broker leads are postponed over and over, and deliveries
// to the other broker's partition keep the relay from probing: /readyz
// says so, naming the partition and its leader, once that has lasted the
// grace, and is 200 again once the leader answers and the rows are
// published.
func TestNotReadyWhileAPartitionsLeaderIsUnreachable(t *testing.T) {
	t.Parallel()
	notReadyWhileLeaderCutOff(t, testenv.DropRequests)
}

// TestNotReadyWhileAPartitionsLeaderIsSilent: the same with the leader
// holding every request unanswered, its connection up: a link that drops
// packets without a reset. librdkafka drops that connection only when a
// record's delivery timeout ends, so the timeout is the default, 30 s (at
// 3 s the connection's state alone showed it, the silence unread).
func TestNotReadyWhileAPartitionsLeaderIsSilent(t *testing.T) {
	t.Parallel()
	notReadyWhileLeaderCutOff(t, testenv.HoldRequests)
}

// notReadyWhileLeaderCutOff runs a relay on testenv.TwoBrokers, one topic
// led by broker 0 and one by broker 1, cuts broker 1 off by fault while
// rows for both topics keep coming, and waits for /readyz to name broker
// 1's partition, then for every row to be published once it answers.
func notReadyWhileLeaderCutOff(t *testing.T, fault testenv.LinkFault) {
	t.Helper()
	const cutOff, fine = "links-cut", "links-fine"
	bootstrap, _, down := testenv.TwoBrokers(t, map[string]int32{cutOff: 1, fine: 0}, 0, fault)
	b := setup(t, bootstrap)
	publishTimeout := 3 * time.Second
	if fault == testenv.HoldRequests {
		publishTimeout = 30 * time.Second
	}
	rr := b.start(t, relay.Config{PollInterval: 200 * time.Millisecond, PublishTimeout: publishTimeout})
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: cutOff}, outbox.Event{Topic: fine})
	eventually(t, 20*time.Second, "both rows published", func() bool { return relaytest.Count(t, b.pool, outbox.StatusPublished) == 2 })
	require.Equal(t, http.StatusOK, rr.readyz(t))

	down.Store(true)
	cut := time.Now()
	relaytest.MustInsert(t, b.pool, outbox.Event{Topic: cutOff})
	stopFine, fineDone := make(chan struct{}), make(chan struct{})
	go func() { // deliveries elsewhere go on
		defer close(fineDone)
		for {
			select {
			case <-stopFine:
				return
			case <-time.After(300 * time.Millisecond):
				relaytest.MustInsert(t, b.pool, outbox.Event{Topic: fine})
			}
		}
	}()
	stopInserting := sync.OnceFunc(func() { close(stopFine); <-fineDone })
	defer stopInserting()
	var body string
	want := cutOff + "[0]: its leader, broker 1,"
	eventually(t, 30*time.Second, "not ready, naming the leader of "+cutOff+", while it is cut off", func() bool {
		var code int
		code, body = rr.readyzBody(t)
		return code != http.StatusOK && strings.Contains(body, want)
	})
	stopInserting()
	t.Logf("figures: not ready, naming it, %.1fs after broker 1 was cut off: %s", time.Since(cut).Seconds(), body)

	down.Store(false)
	back := time.Now()
	eventually(t, 30*time.Second, "ready again, every row published", func() bool {
		return rr.readyz(t) == http.StatusOK && relaytest.Count(t, b.pool, outbox.StatusPending) == 0
	})
	t.Logf("figures: ready %.1fs after broker 1 answered again", time.Since(back).Seconds())
}
