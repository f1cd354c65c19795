package ingest_test

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

// limitDLQ sets the DLQ topic's max.message.bytes.
func (b *testBundle) limitDLQ(t *testing.T, bytes int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit := strconv.Itoa(bytes)
	_, err = kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &limit}}, b.dlqTopic)
	require.NoError(t, err)
}

// A record that the DLQ topic refuses as too large must not block its
// partition: it is dead-lettered without its value, with a header giving
// the value's size, and its neighbour in the same produce request goes
// through whole.
func TestDLQTooLargeIsDeadLetteredWithoutValue(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	b.limitDLQ(t, 2048)

	big := make([]byte, 8000) // random, so compression cannot shrink it under the limit
	_, _ = rand.Read(big)
	testenv.Produce(t, b.bootstrap, b.topic,
		testenv.Record{Key: []byte("big"), Value: big},
		testenv.Record{Key: []byte("small"), Value: []byte(`{"x":1}`)},
	)
	r := b.start(t)

	recs := testenv.Consume(t, b.bootstrap, b.dlqTopic, 2, 30*time.Second)
	byKey := map[string]testenv.Record{}
	for _, rec := range recs {
		byKey[string(rec.Key)] = rec
	}
	require.Empty(t, byKey["big"].Value)
	size, ok := byKey["big"].Header(dlq.HeaderValueOmitted)
	require.True(t, ok, "omitted-value header present")
	require.Equal(t, "8000", size)
	cat, _ := byKey["big"].Header(dlq.HeaderErrorCategory)
	require.Equal(t, string(dlq.CategoryContract), cat, "the DLQ headers are kept")
	require.Equal(t, `{"x":1}`, string(byKey["small"].Value))
	require.NoError(t, r.stop(t))
}

// A record refused as too large even without its value (a large key, or
// large headers, on a DLQ topic with the input topic's limit) must not
// block its partition either: it is dead-lettered without the original's
// key and headers too, with headers saying what was left out; a tombstone
// with a large key as well.
func TestDLQTooLargeKeyIsDeadLetteredWithoutIt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	b.limitDLQ(t, 2048)

	bigKey := make([]byte, 3000) // random, so compression cannot shrink it under the limit
	_, _ = rand.Read(bigKey)
	sent := testenv.Produce(t, b.bootstrap, b.topic,
		testenv.Record{Key: bigKey, Value: []byte(`{"x":1}`), Headers: []testenv.Header{{Key: "h1", Value: []byte("a")}, {Key: "h2", Value: []byte("b")}}},
		testenv.Record{Key: bigKey}, // a tombstone
		testenv.Record{Key: []byte("small"), Value: []byte(`{"x":1}`)},
	)
	r := b.start(t)

	recs := testenv.Consume(t, b.bootstrap, b.dlqTopic, 3, 30*time.Second)
	byOffset := map[int64]dlq.Info{}
	var keys [][]byte
	for _, rec := range recs {
		hs := make([]record.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			hs[i] = record.Header{Key: h.Key, Value: h.Value}
		}
		byOffset[dlq.Decode(hs).OriginalOffset] = dlq.Decode(hs)
		keys = append(keys, rec.Key)
		if dlq.Decode(hs).OriginalOffset == sent[0].Offset {
			_, has := rec.Header("h1")
			require.False(t, has, "the original headers are left out")
		}
	}
	withValue, tombstone, small := byOffset[sent[0].Offset], byOffset[sent[1].Offset], byOffset[sent[2].Offset]
	require.Equal(t, dlq.Info{OriginalTopic: b.topic, OriginalOffset: sent[0].Offset, ValueOmittedBytes: 7, KeyOmittedBytes: 3000, HeadersOmitted: 2},
		dlq.Info{OriginalTopic: withValue.OriginalTopic, OriginalOffset: withValue.OriginalOffset,
			ValueOmittedBytes: withValue.ValueOmittedBytes, KeyOmittedBytes: withValue.KeyOmittedBytes, HeadersOmitted: withValue.HeadersOmitted})
	require.Equal(t, string(dlq.CategoryContract), string(withValue.Category), "the DLQ headers are kept")
	require.Equal(t, 3000, tombstone.KeyOmittedBytes)
	require.Zero(t, tombstone.ValueOmittedBytes, "a tombstone had no value to leave out")
	require.True(t, tombstone.Incomplete())
	require.False(t, small.Incomplete(), "its neighbour goes through whole")
	require.ElementsMatch(t, [][]byte{nil, nil, []byte("small")}, keys)
	require.NoError(t, r.stop(t))
}

// A DLQ topic whose partition has no leader: librdkafka holds the letters
// until they time out and says only that. The line that pauses
// consumption also says what the cluster's metadata shows, and once the
// partition has a leader again the record is dead-lettered and committed.
func TestDLQWithoutLeaderIsExplained(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	cluster, addr := testenv.OwnKafka(t)
	b.dlqTopic = testenv.CreateTopic(t, addr, "ingest-dlq", 1)
	// The DLQ's probe asks for the topic, which a partition's fault does
	// not fail: a broker answers, as it would for a leaderless partition.
	noLeader := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata, kmsg.Produce}, Topic: b.dlqTopic, Partitions: []int32{0},
		Err: kerr.LeaderNotAvailable, Count: -1})
	var logs testenv.SyncBuffer
	b.logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	b.dlqAt(t, addr, 2*time.Second)
	r := b.start(t)

	all := testenv.Produce(t, b.bootstrap, b.topic, testenv.Record{Key: []byte("bad"), Value: []byte("{")})
	want := "the metadata of " + b.dlqTopic + ": partition 0 has no leader"
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), want) }, 30*time.Second, 50*time.Millisecond,
		"the pause is explained: %s", logs.String())
	require.Zero(t, b.committed(t)[0], "nothing committed before the record is dead-lettered")

	noLeader.Remove()
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.Len(t, testenv.ReadAll(t, addr, b.dlqTopic), 1)
	require.NoError(t, r.stop(t))
}
