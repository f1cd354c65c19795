package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/testenv"
)

func TestTopicProduceConsume(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := testenv.Topic(t, "helpers", 4)

	var recs []testenv.Record
	for i := range 20 {
		recs = append(recs, testenv.Record{
			Key:     fmt.Appendf(nil, "k%d", i%5),
			Value:   fmt.Appendf(nil, "v%d", i),
			Headers: []testenv.Header{{Key: "n", Value: fmt.Appendf(nil, "%d", i)}},
		})
	}
	produced := testenv.Produce(t, bootstrap, topic, recs...)
	require.Len(t, produced, 20)
	partitions := map[int32]bool{}
	for _, r := range produced {
		partitions[r.Partition] = true
		require.False(t, r.Timestamp.IsZero())
	}
	require.Greater(t, len(partitions), 1, "keys spread over partitions")

	got := testenv.Consume(t, bootstrap, topic, 20, 10*time.Second)
	require.Len(t, got, 20)
	byValue := map[string]testenv.Record{}
	for _, r := range got {
		byValue[string(r.Value)] = r
	}
	for _, p := range produced {
		r, ok := byValue[string(p.Value)]
		require.True(t, ok, "record %s consumed", p.Value)
		require.Equal(t, p.Partition, r.Partition)
		require.Equal(t, p.Offset, r.Offset)
		require.Equal(t, p.Key, r.Key)
		n, _ := r.Header("n")
		pn, _ := p.Header("n")
		require.Equal(t, pn, n)
	}

	testenv.ProducePartition(t, bootstrap, topic, 3, testenv.Record{Value: []byte("last")})
	all := testenv.ReadAll(t, bootstrap, topic)
	require.Len(t, all, 21)
}

func TestTopicPartitions(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	a := testenv.Topic(t, "parts", 1)
	b := testenv.Topic(t, "parts", 7)
	require.NotEqual(t, a, b)
	got := testenv.ProducePartition(t, bootstrap, b, 6, testenv.Record{Value: []byte("x")})
	require.Equal(t, int32(6), got[0].Partition)
}

func TestAutoCreatedTopicHasDefaultPartitions(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaBootstrap(t)
	topic := "auto-" + t.Name() + fmt.Sprint(time.Now().UnixNano())
	var recs []testenv.Record
	for i := range 30 {
		recs = append(recs, testenv.Record{Key: fmt.Appendf(nil, "%d", i), Value: []byte("v")})
	}
	produced := testenv.Produce(t, bootstrap, topic, recs...)
	max := int32(0)
	for _, r := range produced {
		max = maxOf(max, r.Partition)
	}
	require.Equal(t, int32(testenv.DefaultPartitions-1), max)
}

func maxOf(a, b int32) int32 {
	if a > b {
		return a
	}
	return b
}

func TestBrokerProcessPauseResume(t *testing.T) {
	t.Parallel()
	b := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 2, Topics: []string{"seeded"}})

	before := testenv.ProducePartition(t, b.Addr(), "seeded", 0, testenv.Record{Value: []byte("before")})
	require.Equal(t, int64(0), before[0].Offset)

	// Not idempotent: an idempotent producer may not give up on a batch
	// that is in flight (its sequence numbers would break), so it would wait
	// for the broker forever; this one fails the record after a second.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DisableIdempotentWrite(),
		kgo.RecordDeliveryTimeout(time.Second),
		kgo.RequestTimeoutOverhead(500*time.Millisecond),
		kgo.ProduceRequestTimeout(500*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	// Warm the client up so that the paused produce fails on the hang
	// itself, not on a metadata lookup.
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "seeded", Partition: 1, Value: []byte("warm")}).FirstErr())

	b.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	start := time.Now()
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "seeded", Partition: 1, Value: []byte("while paused")}).FirstErr()
	cancel()
	require.Error(t, err, "produce to a paused broker")
	require.Less(t, time.Since(start), 10*time.Second)
	t.Logf("paused produce failed after %s: %v", time.Since(start).Round(time.Millisecond), err)

	b.Resume(t)
	after := testenv.ProducePartition(t, b.Addr(), "seeded", 0, testenv.Record{Value: []byte("after")})
	require.Equal(t, int64(1), after[0].Offset, "data written before the pause is kept")

	got := testenv.ReadAll(t, b.Addr(), "seeded")
	var values []string
	for _, r := range got {
		if r.Partition == 0 {
			values = append(values, string(r.Value))
		}
	}
	require.Equal(t, []string{"before", "after"}, values)
}

// With Retention, the broker drops records older than it (offsets go on);
// without it, a long soak would keep every record in the broker's memory.
func TestBrokerProcessRetention(t *testing.T) {
	t.Parallel()
	b := testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 1, Topics: []string{"kept"}, Retention: 2 * time.Second})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	logStart := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		offs, err := adm.ListStartOffsets(ctx, "kept")
		require.NoError(t, err)
		o, ok := offs.Lookup("kept", 0)
		require.True(t, ok)
		require.NoError(t, o.Err)
		return o.Offset
	}

	old := testenv.ProducePartition(t, b.Addr(), "kept", 0, testenv.Record{Value: []byte("old")})
	require.Equal(t, int64(0), old[0].Offset)
	require.Equal(t, int64(0), logStart(), "a record younger than the retention is kept")
	start := time.Now()
	require.Eventually(t, func() bool { return logStart() == 1 }, 20*time.Second, 250*time.Millisecond,
		"a record older than the retention (2s) is dropped")
	t.Logf("dropped %s after it was produced", time.Since(start).Round(100*time.Millisecond))

	next := testenv.ProducePartition(t, b.Addr(), "kept", 0, testenv.Record{Value: []byte("new")})
	require.Equal(t, int64(1), next[0].Offset, "offsets go on after the drop")
	got := testenv.ReadAll(t, b.Addr(), "kept")
	require.Len(t, got, 1)
	require.Equal(t, "new", string(got[0].Value))
}

// A metadata request that asks for a missing topic, and allows its
// creation, leaves it missing on this broker; CreateTopic still works.
func TestKafkaWithoutAutoCreateCreatesNoTopic(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.KafkaWithoutAutoCreate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A fresh client per listing: a client's own metadata cache can keep
	// a topic it was told about.
	list := func() kadm.TopicDetails {
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
		require.NoError(t, err)
		defer cl.Close()
		topics, err := kadm.NewClient(cl).ListTopics(ctx)
		require.NoError(t, err)
		return topics
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()
	missing := "missing-" + fmt.Sprint(time.Now().UnixNano())
	md, err := kadm.NewClient(cl).Metadata(ctx, missing)
	require.NoError(t, err)
	require.Error(t, md.Topics[missing].Err, "the broker answers for %s without creating it", missing)
	require.False(t, list().Has(missing), "%s was created", missing)

	created := testenv.CreateTopic(t, bootstrap, "created", 2)
	require.True(t, list().Has(created), "%s was not created", created)
}
