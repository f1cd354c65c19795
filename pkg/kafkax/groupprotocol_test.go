package kafkax

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

// TestConsumerGroupProtocol: with group.protocol=consumer (KIP-848: the
// brokers assign partitions) the consumer starts (librdkafka refuses a
// session.timeout.ms or partition.assignment.strategy set by the client,
// both of which the classic protocol has from this package), two members
// share the partitions through incremental assignments, and a commit
// lands.
func TestConsumerGroupProtocol(t *testing.T) {
	t.Parallel()
	const partitions = 4
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "kip848", partitions)
	recs := make([]testenv.Record, 40)
	for i := range recs {
		recs[i] = testenv.Record{Key: []byte{byte('a' + i%26), byte(i)}, Value: []byte("v")}
	}
	testenv.Produce(t, bootstrap, topic, recs...)

	group := "kip848-" + topic
	var mu sync.Mutex
	owned := map[string]map[int32]bool{}
	member := func(name string) *Consumer {
		c, err := NewConsumer(slog.New(slog.NewTextHandler(io.Discard, nil)), ConsumerConfig{
			ClientConfig: ClientConfig{BootstrapServers: bootstrap, ClientID: name,
				Properties: map[string]string{"group.protocol": "consumer"}},
			GroupID: group, Topic: topic,
		})
		require.NoError(t, err, "group.protocol=consumer must be usable")
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		mu.Lock()
		owned[name] = map[int32]bool{}
		mu.Unlock()
		require.NoError(t, c.Subscribe(func(ps []int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ps {
				owned[name][p] = true
			}
		}, func(ps []int32, _ bool) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ps {
				delete(owned[name], p)
			}
		}))
		return c
	}
	ownedBy := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(owned[name])
	}

	a := member("a")
	got := 0
	require.Eventually(t, func() bool {
		if r, err := a.Poll(50 * time.Millisecond); err == nil && r != nil {
			got++
		}
		return got == len(recs)
	}, 30*time.Second, time.Millisecond, "the only member reads every partition")
	require.Equal(t, partitions, ownedBy("a"))

	b := member("b")
	require.Eventually(t, func() bool {
		_, errA := a.Poll(20 * time.Millisecond)
		_, errB := b.Poll(20 * time.Millisecond)
		require.NoError(t, errA)
		require.NoError(t, errB)
		return ownedBy("a") > 0 && ownedBy("b") > 0 && ownedBy("a")+ownedBy("b") == partitions
	}, 60*time.Second, time.Millisecond, "a second member gets a share of the partitions")

	mu.Lock()
	var p int32 = -1
	for q := range owned["b"] {
		p = q
	}
	mu.Unlock()
	require.NoError(t, b.Commit(map[int32]int64{p: 1}))
	c, err := b.Committed([]int32{p}, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{p: 1}, c)
}
