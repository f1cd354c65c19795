package relay_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
)

// TestRelayWhileTheClusterRefusesTheProducerID: a cluster that refuses the
// idempotent producer its id (CLUSTER_AUTHORIZATION_FAILED: a principal
// without the IdempotentWrite permission) makes every producer client
// fatal before it sends anything, while metadata still answers. The relay
// must say so in /readyz, charge no row an attempt, and not spin: before,
// it built a client per claim and gave the batch back, ready all along.
// Once the cluster takes the id, the rows are published.
func TestRelayWhileTheClusterRefusesTheProducerID(t *testing.T) {
	t.Parallel()
	const topic = "refused-pid"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	var refuse atomic.Bool
	var inits atomic.Int32
	refuse.Store(true)
	c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		inits.Add(1)
		if !refuse.Load() {
			return nil, nil, false
		}
		resp := req.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	b := setup(t, strings.Join(c.ListenAddrs(), ","))
	rows := make([]outbox.Event, 5)
	for i := range rows {
		rows[i] = outbox.Event{Topic: topic}
	}
	relaytest.MustInsert(t, b.pool, rows...)
	rr := b.start(t, relay.Config{PollInterval: 100 * time.Millisecond})

	eventually(t, 20*time.Second, "/readyz names the refused producer id", func() bool {
		code, body := rr.readyzBody(t)
		return code == 503 && strings.Contains(body, "Cluster authorization failed")
	})
	_, body := rr.readyzBody(t)
	require.NotContains(t, body, "no broker answers", "the brokers do answer")
	time.Sleep(5 * time.Second)
	clients := inits.Load()
	released, _ := rr.lookup(t, "route_passport_outbox_released_total")
	_, body = rr.readyzBody(t)
	t.Logf("figures: %d producer clients and %.0f give-backs by 5s after /readyz said why; /readyz: %s", clients, released, body)
	require.LessOrEqual(t, clients, int32(8), "a producer client built per claim")
	// Each client is claimed for once or twice (when the outage ends, and
	// when its first batch fails), its rows given back.
	require.LessOrEqual(t, released, float64(2*len(rows))*float64(clients), "rows claimed and given back over and over")
	var attempts int
	require.NoError(t, b.pool.QueryRow(context.Background(), `select coalesce(sum(attempts), 0) from route_passport_outbox`).Scan(&attempts))
	require.Zero(t, attempts, "a row was charged for the cluster's refusal: %s", relaytest.Describe(t, b.pool))

	refuse.Store(false)
	eventuallyOr(t, 60*time.Second, "the rows published once the cluster took the producer id", func() bool {
		return relaytest.Count(t, b.pool, outbox.StatusPublished) == len(rows)
	}, func() string { return rr.state(t, b.pool) })
	eventually(t, 10*time.Second, "ready again", func() bool { return rr.readyz(t) == 200 })
}
