package testenv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/testenv"
)

// TestConfluentClientsOnSharedBroker is the evidence behind using kfake for
// the service's tests: librdkafka (what production runs, via pkg/kafkax)
// produces idempotently with acks=all, consumes in a group with manual
// commits, and the committed offsets are what a franz-go admin reads back.
func TestConfluentClientsOnSharedBroker(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "confluent", 3)
	const n = 30

	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  bootstrap,
		"enable.idempotence": true,
		"acks":               "all",
		"linger.ms":          5,
		"compression.type":   kafkax.Compression,
		"message.timeout.ms": 30000,
	})
	require.NoError(t, err)
	defer p.Close()

	deliveries := make(chan kafka.Event, n)
	for i := range n {
		err := p.Produce(&kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key:            fmt.Appendf(nil, "key-%d", i),
			Value:          fmt.Appendf(nil, "value-%d", i),
			Headers:        []kafka.Header{{Key: "eventId", Value: fmt.Appendf(nil, "e%d", i)}},
		}, deliveries)
		require.NoError(t, err)
	}
	ends := map[int32]int64{}
	for range n {
		select {
		case ev := <-deliveries:
			m, ok := ev.(*kafka.Message)
			require.True(t, ok, "delivery event %T: %v", ev, ev)
			require.NoError(t, m.TopicPartition.Error)
			tp := m.TopicPartition
			ends[tp.Partition] = max(ends[tp.Partition], int64(tp.Offset)+1)
		case <-time.After(30 * time.Second):
			t.Fatal("no delivery report within 30s")
		}
	}
	require.Zero(t, p.Flush(10000))

	// What franz-go reads is what librdkafka wrote, headers included.
	got := testenv.Consume(t, bootstrap, topic, n, 10*time.Second)
	for _, r := range got {
		id, ok := r.Header("eventId")
		require.True(t, ok)
		require.Equal(t, "e"+string(r.Value[len("value-"):]), id)
	}

	group := "confluent-" + topic
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":        bootstrap,
		"group.id":                 group,
		"auto.offset.reset":        "earliest",
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"session.timeout.ms":       10000,
	})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	require.NoError(t, c.SubscribeTopics([]string{topic}, nil))

	seen := 0
	deadline := time.Now().Add(30 * time.Second)
	for seen < n && time.Now().Before(deadline) {
		m, err := c.ReadMessage(time.Second)
		if err != nil {
			if kerr, ok := err.(kafka.Error); ok && kerr.IsTimeout() {
				continue
			}
			require.NoError(t, err)
		}
		seen++
		// Manual commit of exactly this record, as kafkax does.
		next := m.TopicPartition
		next.Offset++
		_, err = c.CommitOffsets([]kafka.TopicPartition{next})
		require.NoError(t, err)
	}
	require.Equal(t, n, seen)

	committed := testenv.CommittedOffsets(t, bootstrap, group, topic)
	require.Equal(t, ends, committed)

	// Leaving the group cleanly must work too (a rebalance to nobody).
	require.NoError(t, c.Close())
	closed = true
	require.Equal(t, ends, testenv.CommittedOffsets(t, bootstrap, group, topic))
}
