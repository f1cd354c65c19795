package kafkax

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pcp/route-processing/pkg/record"
)

// fatalProducer is a producer of an in-process broker whose answers to one
// request kind are answer's while refuse is set.
func fatalProducer(t *testing.T, key kmsg.Key, answer func(kmsg.Request) kmsg.Response) (pr *Producer, refuse *atomic.Bool, asked *atomic.Int32) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	refuse, asked = &atomic.Bool{}, &atomic.Int32{}
	refuse.Store(true)
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		asked.Add(1)
		if !refuse.Load() {
			return nil, nil, false
		}
		return answer(req), nil, true
	})
	pr, err = NewProducer(slog.New(slog.NewTextHandler(io.Discard, nil)), ProducerConfig{
		ClientConfig: ClientConfig{BootstrapServers: strings.Join(c.ListenAddrs(), ",")}, DeliveryTimeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { pr.Close(time.Second) })
	return pr, refuse, asked
}

// TestAFatalErrorThatOutlivesClientsWaits: a cluster that refuses the
// producer id (here CLUSTER_AUTHORIZATION_FAILED, as for a principal
// without the IdempotentWrite permission) makes every new client fatal
// before it delivers anything. Before, each call built a new client and
// failed as "not attempted", so the relay gave its batch back and claimed
// it again at once, looking ready. Now the second such client makes the
// next one wait, calls meanwhile fail as the cluster's fault (unavailable)
// naming the cause, Probe too, and once the cluster takes the producer id
// a new client delivers.
func TestAFatalErrorThatOutlivesClientsWaits(t *testing.T) {
	t.Parallel()
	pr, refuse, inits := fatalProducer(t, kmsg.InitProducerID, func(req kmsg.Request) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	})
	ctx := context.Background()
	rec := []record.Record{{Topic: "t", Value: []byte("v")}}

	calls, waited := 0, 0
	var last error
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); calls++ {
		last = pr.ProduceBatch(ctx, rec)[0]
		require.Error(t, last)
		var fw *FatalWaitError
		if errors.As(last, &fw) {
			waited++
			require.ErrorIs(t, last, record.ErrUnavailable, "a wait is the cluster's fault")
			require.ErrorIs(t, last, record.ErrClientUnusable, "a wait is the client's, whatever the brokers answer")
			require.Contains(t, fw.Error(), "Cluster authorization failed")
		} else {
			require.ErrorIs(t, last, record.ErrNotAttempted, "a record of a fatal client is not charged: %v", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("figures: %d calls in 3s, %d clients asked for a producer id, %d calls answered by the wait; last: %v", calls, inits.Load(), waited, last)
	require.Greater(t, calls, 20, "too few calls to tell (a machine this slow shows nothing)")
	// The first client, its immediate replacement, then waits of 0.5–1 s,
	// 1–2 s: at most five clients in 3 s, one per call before.
	require.LessOrEqual(t, inits.Load(), int32(5), "a client built per call")
	require.Greater(t, waited, calls/2)
	err := pr.Probe(ctx, "", time.Second)
	var fw *FatalWaitError
	require.ErrorAs(t, err, &fw, "Probe must not pass while no client can be used")

	refuse.Store(false)
	require.Eventually(t, func() bool { return pr.ProduceBatch(ctx, rec)[0] == nil }, 40*time.Second, 100*time.Millisecond,
		"no delivery once the cluster took the producer id")
}

// TestTheRecordsOfAFatalRequestAreNotCharged: the records of the produce
// request that made the client fatal come back with the broker's code
// (OUT_OF_ORDER_SEQUENCE_NUMBER) and no fatal flag. They are the client's
// failure, not theirs: not attempted, and the client is replaced at once
// (before, they were charged an attempt and the fatal client stayed until
// the next call).
func TestTheRecordsOfAFatalRequestAreNotCharged(t *testing.T) {
	t.Parallel()
	pr, refuse, _ := fatalProducer(t, kmsg.Produce, func(req kmsg.Request) kmsg.Response {
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range preq.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OutOfOrderSequenceNumber.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
	ctx := context.Background()
	rec := []record.Record{{Topic: "t", Value: []byte("v")}}

	err := pr.ProduceBatch(ctx, rec)[0]
	require.ErrorIs(t, err, record.ErrNotAttempted, "charged: %v", err)
	pr.mu.RLock()
	replaced := pr.p == nil
	pr.mu.RUnlock()
	require.True(t, replaced, "the fatal client is still the current one")

	refuse.Store(false)
	require.NoError(t, pr.ProduceBatch(ctx, rec)[0], "the next client delivers")
}
