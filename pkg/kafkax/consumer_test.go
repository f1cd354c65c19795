package kafkax

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

// TestPausedPartitionWatermarkFollowsTheBroker: a paused partition gets no
// fetch responses, so librdkafka's cached high watermark stops; the lag of
// a backlog that builds while the ingestor is paused (a database outage)
// must still show. HighWatermark asks the broker for paused partitions.
func TestPausedPartitionWatermarkFollowsTheBroker(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "watermark", 1)
	produce := func(n int) {
		recs := make([]testenv.Record, n)
		for i := range recs {
			recs[i] = testenv.Record{Value: []byte("v")}
		}
		testenv.Produce(t, bootstrap, topic, recs...)
	}
	produce(3)
	c, err := NewConsumer(slog.New(slog.NewTextHandler(io.Discard, nil)), ConsumerConfig{
		ClientConfig: ClientConfig{BootstrapServers: bootstrap, ClientID: "watermark-test"},
		GroupID:      "watermark-" + topic, Topic: topic,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.NoError(t, c.Subscribe(nil, nil))
	got := 0
	require.Eventually(t, func() bool {
		if r, err := c.Poll(100 * time.Millisecond); err == nil && r != nil {
			got++
		}
		return got == 3
	}, 30*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { h, ok := c.HighWatermark(0, time.Now().Add(time.Second)); return ok && h == 3 }, 10*time.Second, 50*time.Millisecond)

	require.NoError(t, c.Pause([]int32{0}))
	// A fetch already on its way when the pause came may still bring news;
	// after fetch.wait.max.ms (500 ms) none is.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		_, _ = c.Poll(50 * time.Millisecond)
	}
	produce(5)
	require.Eventually(t, func() bool {
		_, _ = c.Poll(50 * time.Millisecond) // the loop keeps polling while paused
		h, ok := c.HighWatermark(0, time.Now().Add(time.Second))
		return ok && h == 8
	}, 3*askWatermarkEvery, 50*time.Millisecond, "the paused partition's high watermark stayed behind the broker's")

	require.NoError(t, c.Resume([]int32{0}))
	h, ok := c.HighWatermark(0, time.Now().Add(time.Second))
	require.True(t, ok)
	require.GreaterOrEqual(t, h, int64(3))
}

// TestWatermarkAsksStopAtTheirDeadline: with the broker frozen, each
// ask for a paused partition's high watermark runs out its wait; a caller
// asking for many partitions under one deadline waits about that deadline,
// not one wait per partition (the ingestor's lag gauges ask once a second
// on its poll loop).
func TestWatermarkAsksStopAtTheirDeadline(t *testing.T) {
	t.Parallel()
	const partitions = 8
	broker := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: partitions})
	topic := testenv.CreateTopic(t, broker.Addr(), "watermark-deadline", partitions)
	c, err := NewConsumer(slog.New(slog.NewTextHandler(io.Discard, nil)), ConsumerConfig{
		ClientConfig: ClientConfig{BootstrapServers: broker.Addr(), ClientID: "watermark-deadline"},
		GroupID:      "watermark-deadline-" + topic, Topic: topic,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	all := make([]int32, partitions)
	for i := range all {
		all[i] = int32(i)
	}
	assigned := make(chan struct{})
	require.NoError(t, c.Subscribe(func([]int32) { close(assigned) }, nil))
	require.Eventually(t, func() bool {
		_, _ = c.Poll(50 * time.Millisecond)
		select {
		case <-assigned:
			return true
		default:
			return false
		}
	}, 30*time.Second, time.Millisecond, "partitions assigned")
	require.NoError(t, c.Pause(all))
	time.Sleep(askWatermarkEvery) // the paused partitions' asks are due

	broker.Pause(t)
	defer broker.Resume(t)
	start := time.Now()
	askUntil := start.Add(askWatermarkTimeout)
	for _, p := range all {
		c.HighWatermark(p, askUntil)
	}
	took := time.Since(start)
	t.Logf("figures: %d paused partitions' watermarks, broker frozen: %s", partitions, took.Round(time.Millisecond))
	// librdkafka's query may take twice its wait (1.0 s for 500 ms here);
	// a wait each took 8 s.
	require.Less(t, took, 3*askWatermarkTimeout, "one deadline for all the asks, not a wait each")
}

// TestCommittedAsksTheCoordinator: what the group committed comes back per
// partition; a partition with nothing committed is left out.
func TestCommittedAsksTheCoordinator(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "committed", 2)
	testenv.Produce(t, bootstrap, topic, testenv.Record{Value: []byte("v")})
	c, err := NewConsumer(slog.New(slog.NewTextHandler(io.Discard, nil)), ConsumerConfig{
		ClientConfig: ClientConfig{BootstrapServers: bootstrap, ClientID: "committed-test"},
		GroupID:      "committed-" + topic, Topic: topic,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.NoError(t, c.Subscribe(nil, nil))
	require.Eventually(t, func() bool {
		r, err := c.Poll(100 * time.Millisecond)
		return err == nil && r != nil
	}, 30*time.Second, time.Millisecond, "joined and polled")

	got, err := c.Committed([]int32{0, 1}, 5*time.Second)
	require.NoError(t, err)
	require.Empty(t, got, "nothing committed yet")
	require.NoError(t, c.Commit(map[int32]int64{1: 7}))
	got, err = c.Committed([]int32{0, 1}, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{1: 7}, got)
}

// TestAFailedAssignmentFailsPoll: librdkafka refuses the group's whole
// assignment when one of its partitions is already assigned, and
// confluent-kafka-go does not make the change itself once the callback
// has tried: the member would own partitions it never consumes until the
// next rebalance. Poll must fail instead (the process restarts), naming
// what failed, and the callee must not be told of partitions it does not
// get.
func TestAFailedAssignmentFailsPoll(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "assign-fails", 2)
	c, err := NewConsumer(slog.New(slog.NewTextHandler(io.Discard, nil)), ConsumerConfig{
		ClientConfig: ClientConfig{BootstrapServers: bootstrap, ClientID: "assign-fails"},
		GroupID:      "assign-fails-" + topic, Topic: topic,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	var told [][]int32
	require.NoError(t, c.Subscribe(func(p []int32) { told = append(told, p) }, nil))
	// Partition 0 in the assignment before the group hands it out: the
	// state librdkafka refuses to add to.
	require.NoError(t, c.c.IncrementalAssign([]kafka.TopicPartition{{Topic: &topic, Partition: 0}}))

	var pollErr error
	require.Eventually(t, func() bool {
		_, pollErr = c.Poll(100 * time.Millisecond)
		return pollErr != nil
	}, 30*time.Second, time.Millisecond, "Poll went on after the group's assignment failed")
	require.ErrorContains(t, pollErr, "assign partitions [0 1] of "+topic)
	require.ErrorContains(t, pollErr, "already part of the current assignment")
	require.Empty(t, told, "the callee was told of partitions the consumer does not fetch")
	_, err = c.Poll(10 * time.Millisecond)
	require.ErrorIs(t, err, pollErr, "the failure is fatal: every later Poll returns it")
}
