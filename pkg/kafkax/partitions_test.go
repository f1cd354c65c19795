package kafkax

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/testenv"
)

func TestDescribePartitionsText(t *testing.T) {
	t.Parallel()
	healthy := func(id int32) kafka.PartitionMetadata {
		return kafka.PartitionMetadata{ID: id, Leader: 1, Replicas: []int32{1, 2, 3}, Isrs: []int32{1, 2, 3}}
	}
	noLeader := kafka.PartitionMetadata{ID: 2, Leader: -1, Replicas: []int32{1, 2, 3},
		Error: kafka.NewError(kafka.ErrLeaderNotAvailable, "", false)}
	shrunk := kafka.PartitionMetadata{ID: 0, Leader: 1, Replicas: []int32{1, 2, 3}, Isrs: []int32{1}}
	offline := kafka.PartitionMetadata{ID: 1, Leader: 3, Replicas: []int32{3}, Isrs: []int32{3},
		Error: kafka.NewError(kafka.ErrReplicaNotAvailable, "", false)}

	for _, tc := range []struct {
		name string
		tm   kafka.TopicMetadata
		want string
	}{
		{"nothing to see", kafka.TopicMetadata{Topic: "t", Partitions: []kafka.PartitionMetadata{healthy(0), healthy(1)}},
			"the metadata of t shows a leader and every replica in sync for each of its 2 partitions"},
		{"nothing to see in one", kafka.TopicMetadata{Topic: "t", Partitions: []kafka.PartitionMetadata{healthy(0)}},
			"the metadata of t shows a leader and every replica in sync for its one partition"},
		{"in partition order", kafka.TopicMetadata{Topic: "t", Partitions: []kafka.PartitionMetadata{noLeader, healthy(3), offline, shrunk}},
			"the metadata of t: partition 0 has 1 of 3 replicas in sync; partition 1: Broker: Replica not available; partition 2 has no leader"},
		{"the topic's own error", kafka.TopicMetadata{Topic: "t", Error: kafka.NewError(kafka.ErrLeaderNotAvailable, "", false)},
			"the metadata of t: Broker: Leader not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, describeTopic(tc.tm))
		})
	}

	t.Run("bounded", func(t *testing.T) {
		var parts []kafka.PartitionMetadata
		for id := range int32(8) {
			parts = append(parts, kafka.PartitionMetadata{ID: id, Leader: -1})
		}
		require.Equal(t, "the metadata of t: partition 0 has no leader; partition 1 has no leader; partition 2 has no leader; "+
			"partition 3 has no leader; partition 4 has no leader; 3 more", describeTopic(kafka.TopicMetadata{Topic: "t", Partitions: parts}))
	})
}

// DescribePartitions asks a real broker: a topic it has, in its actual
// state, and one it does not, which the answer names as unknown.
func TestDescribePartitionsAsksTheBroker(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "describe", 2)
	missing := "describe-missing-" + uuid.NewString()[:8]
	p := noAutoCreateProducer(t, slog.New(slog.NewTextHandler(io.Discard, nil)), bootstrap, "describe-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := p.DescribePartitions(ctx, topic, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "the metadata of "+topic+" shows a leader and every replica in sync for each of its 2 partitions", got)

	got, err = p.DescribePartitions(ctx, missing, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "the metadata of "+missing+": Broker: Unknown topic or partition", got)

	done, stop := context.WithCancel(ctx)
	stop()
	_, err = p.DescribePartitions(done, topic, 5*time.Second)
	require.ErrorIs(t, err, context.Canceled)
}
