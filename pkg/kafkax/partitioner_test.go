package kafkax

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

// A keyed record goes to the partition a Java client's default partitioner
// (murmur2 of the key; franz-go's StickyKeyPartitioner with its default
// hasher is the same) picks, on a real broker: what downstream consumers
// joining by key expect.
func TestKeysGoWhereJavaClientsPutThem(t *testing.T) {
	t.Parallel()
	const partitions = 6
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "partitioner", partitions)
	p, err := NewProducer(slog.New(slog.NewTextHandler(io.Discard, nil)), ProducerConfig{
		ClientConfig:    ClientConfig{BootstrapServers: bootstrap, ClientID: "partitioner-test"},
		DeliveryTimeout: 10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(time.Second) })

	recs := make([]record.Record, 60)
	for i := range recs {
		recs[i] = record.Record{Topic: topic, Key: []byte(fmt.Sprintf("route-%d", i)), Value: []byte("v")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, err := range p.ProduceBatch(ctx, recs) {
		require.NoError(t, err, "record %d", i)
	}

	java := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	got := testenv.ReadAll(t, bootstrap, topic)
	require.Len(t, got, len(recs))
	used := map[int32]bool{}
	for _, r := range got {
		want := java.Partition(&kgo.Record{Key: r.Key}, partitions)
		require.EqualValues(t, want, r.Partition, "key %s", r.Key)
		used[r.Partition] = true
	}
	require.Len(t, used, partitions, "60 keys should spread over every partition")
}
