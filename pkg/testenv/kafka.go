package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvKafkaBootstrap names the variable that points the tests at an existing
// Kafka cluster (comma-separated host:port list).
const EnvKafkaBootstrap = "TEST_KAFKA_BOOTSTRAP_SERVERS"

// DefaultPartitions is the partition count of auto-created topics on the
// in-process broker (and of the Docker broker).
const DefaultPartitions = 3

var sharedKafka struct {
	once   sync.Once
	addr   string
	source string
	err    error
}

// KafkaBootstrap returns the bootstrap address of the broker shared by the
// tests of this binary ("127.0.0.1:port" for the in-process and Docker
// brokers; the variable's value when TEST_KAFKA_BOOTSTRAP_SERVERS is set).
// Tests must keep to topics of their own ([Topic]).
func KafkaBootstrap(t testing.TB) string {
	t.Helper()
	requireMain(t)
	sharedKafka.once.Do(func() {
		start := time.Now()
		sharedKafka.addr, sharedKafka.source, sharedKafka.err = startKafka()
		if sharedKafka.err == nil {
			t.Logf("testenv: shared Kafka (%s) at %s ready in %s", sharedKafka.source, sharedKafka.addr, time.Since(start).Round(time.Millisecond))
		}
	})
	if sharedKafka.err != nil {
		t.Fatalf("testenv: kafka: %v", sharedKafka.err)
	}
	return sharedKafka.addr
}

func startKafka() (addr, source string, err error) {
	if v := os.Getenv(EnvKafkaBootstrap); v != "" {
		return v, EnvKafkaBootstrap, nil
	}
	if pool := dockerPool(); pool != nil {
		addr, err := dockerKafka(pool)
		return addr, "docker", err
	}
	c, err := newFakeCluster(0, DefaultPartitions)
	if err != nil {
		return "", "", err
	}
	atTeardown(c.Close)
	return c.ListenAddrs()[0], "kfake", nil
}

// newFakeCluster is the in-process broker: one broker (so that every
// partition leader and group coordinator is the address clients bootstrap
// from), topics auto-created on produce/metadata like a default Kafka.
// port 0 picks a free one.
func newFakeCluster(port, partitions int, topics ...string) (*kfake.Cluster, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	return kfake.NewCluster(opts...)
}

// OwnKafka starts a broker of t's own (kfake, in process, one broker,
// topics of one partition created on demand) and returns it with its
// address, for faults the shared broker must not see: kfake's Fault and
// ControlKey act on every client of a cluster.
func OwnKafka(t testing.TB) (*kfake.Cluster, string) {
	t.Helper()
	c, err := newFakeCluster(0, 1)
	if err != nil {
		t.Fatalf("testenv: kafka of the test's own: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

// KafkaWithoutAutoCreate starts a broker of t's own (kfake, in process,
// one broker) that creates no topic on demand, whatever a client asks, and
// returns its address. It is for tests whose premise is a topic that does
// not exist: the shared broker, like Apache Kafka by default, creates
// topics on metadata requests, and was seen to create one that a client
// configured with allow.auto.create.topics=false had asked about (the first
// of a relay's output topics, in 2 of 18 runs of its package six at a
// time).
func KafkaWithoutAutoCreate(t testing.TB) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0), kfake.DefaultNumPartitions(DefaultPartitions))
	if err != nil {
		t.Fatalf("testenv: kafka without auto-creation: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

func seeds(bootstrap string) kgo.Opt {
	return kgo.SeedBrokers(strings.Split(bootstrap, ",")...)
}

func adminClient(t testing.TB, bootstrap string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(seeds(bootstrap))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// Topic creates a uniquely named topic (prefix, a dash and a random suffix)
// with the given number of partitions on the shared broker, waits until
// every partition has a leader, and deletes it at t's cleanup.
func Topic(t testing.TB, prefix string, partitions int) string {
	t.Helper()
	return CreateTopic(t, KafkaBootstrap(t), prefix, partitions)
}

// CreateTopic is [Topic] on any broker (e.g. a [BrokerProcess]).
func CreateTopic(t testing.TB, bootstrap, prefix string, partitions int) string {
	t.Helper()
	name := prefix + "-" + randHex(5)
	adm := adminClient(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Replication factor -1: the broker's default, valid on one broker and
	// on many.
	if _, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, name); err != nil {
		t.Fatalf("testenv: create topic %s: %v", name, err)
	}
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil {
			if td, ok := md.Topics[name]; ok && td.Err == nil && len(td.Partitions) == partitions && allLed(td) {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: topic %s has no leaders after 30s (last error: %v)", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopic(ctx, name)
	})
	return name
}

func allLed(td kadm.TopicDetail) bool {
	for _, p := range td.Partitions {
		if p.Leader < 0 || p.Err != nil {
			return false
		}
	}
	return true
}

// Header is a record header; Kafka allows repeated keys, so headers are a
// list.
type Header struct {
	Key   string
	Value []byte
}

// Record is a Kafka record as tests write and read it.
type Record struct {
	Key, Value []byte
	Headers    []Header
	// Partition, Offset and Timestamp are filled in by Produce and the
	// consuming helpers; Produce ignores them on input (see
	// [ProducePartition]).
	Partition int32
	Offset    int64
	Timestamp time.Time
}

// Header returns the value of the first header named key.
func (r Record) Header(key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Produce writes recs to topic, partitioned by key (franz-go's default
// partitioner: murmur2 of the key like the Java client; records without a key
// go to any partition), and returns them with partition, offset and
// timestamp filled in. It fails t unless every record is acknowledged
// (acks=all) within 30s.
func Produce(t testing.TB, bootstrap, topic string, recs ...Record) []Record {
	t.Helper()
	return produce(t, bootstrap, topic, -1, recs)
}

// ProducePartition is [Produce] into one partition.
func ProducePartition(t testing.TB, bootstrap, topic string, partition int32, recs ...Record) []Record {
	t.Helper()
	return produce(t, bootstrap, topic, partition, recs)
}

func produce(t testing.TB, bootstrap, topic string, partition int32, recs []Record) []Record {
	t.Helper()
	opts := []kgo.Opt{seeds(bootstrap), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0)}
	if partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Partition: partition}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		krs[i] = kr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("testenv: produce to %s: %v", topic, err)
	}
	out := make([]Record, len(krs))
	for i, kr := range krs {
		out[i] = fromKgo(kr)
	}
	return out
}

func fromKgo(kr *kgo.Record) Record {
	r := Record{Key: kr.Key, Value: kr.Value, Partition: kr.Partition, Offset: kr.Offset, Timestamp: kr.Timestamp}
	for _, h := range kr.Headers {
		r.Headers = append(r.Headers, Header{Key: h.Key, Value: h.Value})
	}
	return r
}

// Consume reads topic from the beginning of every partition, without a
// consumer group, until n records arrived, and returns them in arrival order
// (per partition in offset order). It fails t if fewer than n arrive within
// timeout; more than n are not waited for, but returned if already fetched.
func Consume(t testing.TB, bootstrap, topic string, n int, timeout time.Duration) []Record {
	t.Helper()
	got, err := consume(bootstrap, topic, timeout, func(recs []Record) bool { return len(recs) >= n })
	if err != nil {
		t.Fatalf("testenv: consume %s: %v", topic, err)
	}
	if len(got) < n {
		t.Fatalf("testenv: consume %s: got %d records within %s, want %d", topic, len(got), timeout, n)
	}
	return got
}

// ReadAll returns every record of topic up to its current end offsets (a
// snapshot: "what has been written so far"), in per-partition offset order.
func ReadAll(t testing.TB, bootstrap, topic string) []Record {
	t.Helper()
	adm := adminClient(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("testenv: end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	got, err := consume(bootstrap, topic, 30*time.Second, func(recs []Record) bool {
		next := map[int32]int64{}
		for _, r := range recs {
			next[r.Partition] = r.Offset + 1
		}
		for p, end := range want {
			if next[p] < end {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("testenv: read %s: %v", topic, err)
	}
	// Keep only what existed at the snapshot.
	out := got[:0]
	for _, r := range got {
		if r.Offset < want[r.Partition] {
			out = append(out, r)
		}
	}
	return out
}

func consume(bootstrap, topic string, timeout time.Duration, done func([]Record) bool) ([]Record, error) {
	cl, err := kgo.NewClient(seeds(bootstrap),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got []Record
	for !done(got) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got, nil
		}
		var errs []error
		fs.EachError(func(topic string, p int32, err error) {
			errs = append(errs, fmt.Errorf("partition %d: %w", p, err))
		})
		if err := errors.Join(errs...); err != nil && !isRetriableFetchErr(err) {
			return got, err
		}
		fs.EachRecord(func(kr *kgo.Record) { got = append(got, fromKgo(kr)) })
	}
	return got, nil
}

func isRetriableFetchErr(err error) bool {
	var re interface{ Retriable() bool }
	return errors.As(err, &re) && re.Retriable()
}

// CommittedOffsets returns the offsets group has committed on topic,
// partition to offset (the next record to read, Kafka's convention).
// Partitions without a commit are absent.
func CommittedOffsets(t testing.TB, bootstrap, group, topic string) map[int32]int64 {
	t.Helper()
	adm := adminClient(t, bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("testenv: committed offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	for p, o := range resps[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out
}
