package kafkax

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.VerifyNoLeaks()) }

type readerBundle struct {
	bootstrap string
	topic     string
	group     string
	reader    *Reader
}

func setupReader(t *testing.T, partitions int) *readerBundle {
	t.Helper()
	b := &readerBundle{
		bootstrap: testenv.KafkaBootstrap(t),
		topic:     testenv.Topic(t, "reader", partitions),
	}
	b.group = "reader-test-" + b.topic
	r, err := NewReader(slog.New(slog.NewTextHandler(io.Discard, nil)), ReaderConfig{
		ClientConfig: ClientConfig{BootstrapServers: b.bootstrap, ClientID: "reader-test"},
		GroupID:      b.group,
		IdleTimeout:  20 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	b.reader = r
	return b
}

func (b *readerBundle) produce(t *testing.T, partition int32, n int, from int) {
	t.Helper()
	recs := make([]testenv.Record, n)
	for i := range recs {
		recs[i] = testenv.Record{
			Key:     []byte(fmt.Sprintf("k%d", from+i)),
			Value:   []byte(fmt.Sprintf("v%d", from+i)),
			Headers: []testenv.Header{{Key: "h", Value: []byte{byte(from + i)}}, {Key: "h", Value: nil}},
		}
	}
	testenv.ProducePartition(t, b.bootstrap, b.topic, partition, recs...)
}

func (b *readerBundle) read(t *testing.T, ranges ...record.PartitionRange) []record.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []record.Record
	require.NoError(t, b.reader.ReadRanges(ctx, b.topic, ranges, func(r record.Record) error {
		got = append(got, r)
		return nil
	}))
	return got
}

func keysOf(recs []record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%d@%d=%s", r.Partition, r.Offset, r.Key)
	}
	return out
}

func TestReader(t *testing.T) {
	t.Parallel()

	t.Run("partitions and watermarks", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 3)
		ctx := context.Background()
		parts, err := b.reader.Partitions(ctx, b.topic)
		require.NoError(t, err)
		require.Equal(t, []int32{0, 1, 2}, parts)

		b.produce(t, 1, 4, 0)
		low, high, err := b.reader.Watermarks(ctx, b.topic, 1)
		require.NoError(t, err)
		require.Equal(t, [2]int64{0, 4}, [2]int64{low, high})
		low, high, err = b.reader.Watermarks(ctx, b.topic, 0)
		require.NoError(t, err)
		require.Equal(t, [2]int64{0, 0}, [2]int64{low, high})
	})

	t.Run("unknown topic", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 1)
		_, err := b.reader.Partitions(context.Background(), b.topic+"-missing")
		require.Error(t, err)
	})

	t.Run("reads exactly the ranges and keeps records intact", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 2)
		b.produce(t, 0, 5, 0)
		b.produce(t, 1, 3, 10)
		// A null key and a null value survive the round trip as nil.
		testenv.ProducePartition(t, b.bootstrap, b.topic, 1, testenv.Record{Key: nil, Value: nil})

		got := b.read(t, record.PartitionRange{Partition: 0, Start: 1, End: 4}, record.PartitionRange{Partition: 1, Start: 0, End: 4})
		require.ElementsMatch(t, []string{"0@1=k1", "0@2=k2", "0@3=k3", "1@0=k10", "1@1=k11", "1@2=k12", "1@3="}, keysOf(got))
		for _, r := range got {
			require.Equal(t, b.topic, r.Topic)
			require.False(t, r.Timestamp.IsZero())
			require.Equal(t, "CreateTime", r.TimestampType)
			if r.Partition == 1 && r.Offset == 3 {
				require.Nil(t, r.Key)
				require.Nil(t, r.Value)
				continue
			}
			require.Equal(t, "v"+string(r.Key[1:]), string(r.Value))
			require.Len(t, r.Headers, 2)
			require.Equal(t, "h", r.Headers[0].Key)
			require.Equal(t, "h", r.Headers[1].Key)
		}
		// Offset order within a partition.
		var last = map[int32]int64{0: -1, 1: -1}
		for _, r := range got {
			require.Greater(t, r.Offset, last[r.Partition])
			last[r.Partition] = r.Offset
		}
	})

	t.Run("stops at the captured end while producers append", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 1)
		b.produce(t, 0, 3, 0)
		_, high, err := b.reader.Watermarks(context.Background(), b.topic, 0)
		require.NoError(t, err)
		b.produce(t, 0, 3, 3)
		got := b.read(t, record.PartitionRange{Partition: 0, Start: 0, End: high})
		require.Equal(t, []string{"0@0=k0", "0@1=k1", "0@2=k2"}, keysOf(got))
	})

	t.Run("ends at the end of the partition", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 2)
		b.produce(t, 0, 2, 0)
		start := time.Now()
		got := b.read(t, record.PartitionRange{Partition: 0, Start: 0, End: 1000}, record.PartitionRange{Partition: 1, Start: 0, End: 1000})
		require.Equal(t, []string{"0@0=k0", "0@1=k1"}, keysOf(got))
		require.Less(t, time.Since(start), 15*time.Second, "ended by end-of-partition, not by the idle timeout")
	})

	t.Run("empty ranges read nothing", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 1)
		b.produce(t, 0, 2, 0)
		require.Empty(t, b.read(t, record.PartitionRange{Partition: 0, Start: 2, End: 2}))
		require.Empty(t, b.read(t))
	})

	t.Run("a failing callback stops the read with its error", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 1)
		b.produce(t, 0, 3, 0)
		boom := fmt.Errorf("boom")
		n := 0
		err := b.reader.ReadRanges(context.Background(), b.topic, []record.PartitionRange{{Partition: 0, Start: 0, End: 3}}, func(record.Record) error {
			n++
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, 1, n)
		// The reader is reusable afterwards.
		require.Len(t, b.read(t, record.PartitionRange{Partition: 0, Start: 0, End: 3}), 3)
	})

	t.Run("offset for time", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 1)
		b.produce(t, 0, 2, 0)
		time.Sleep(20 * time.Millisecond)
		mid := time.Now()
		time.Sleep(20 * time.Millisecond)
		b.produce(t, 0, 2, 2)
		ctx := context.Background()

		off, ok, err := b.reader.OffsetForTime(ctx, b.topic, 0, mid)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(2), off)

		off, ok, err = b.reader.OffsetForTime(ctx, b.topic, 0, time.Unix(0, 0))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(0), off)

		_, ok, err = b.reader.OffsetForTime(ctx, b.topic, 0, time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("commits nothing for its group", func(t *testing.T) {
		t.Parallel()
		b := setupReader(t, 1)
		b.produce(t, 0, 3, 0)
		require.Len(t, b.read(t, record.PartitionRange{Partition: 0, Start: 0, End: 3}), 3)
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Kafka answers an empty list for a group that has nothing; kfake
		// says the group does not exist. Either way, nothing was committed.
		offsets, err := kadm.NewClient(cl).FetchOffsets(ctx, b.group)
		if err != nil {
			require.ErrorIs(t, err, kerr.GroupIDNotFound)
			return
		}
		require.Empty(t, offsets.Offsets()[b.topic])
	})
}

// TestReaderRequestsEndSoonAfterCancel: a metadata request to a broker that
// accepts connections and never answers (a frozen broker, a blackhole) ends
// within about a slice of its context's end, not after RequestTimeout: an
// operator's Ctrl-C stops a tool promptly.
func TestReaderRequestsEndSoonAfterCancel(t *testing.T) {
	t.Parallel()
	port, _ := silentBroker(t)

	r, err := NewReader(slog.New(slog.NewTextHandler(io.Discard, nil)), ReaderConfig{
		ClientConfig:   ClientConfig{BootstrapServers: fmt.Sprintf("127.0.0.1:%d", port), ClientID: "reader-cancel-test"},
		RequestTimeout: 20 * time.Second,
	})
	require.NoError(t, err)
	defer r.Close()

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err = r.Partitions(ctx, "any")
	took := time.Since(start)
	require.Error(t, err)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, took, 300*time.Millisecond+requestSlice+time.Second,
		"the request ran on after its context ended (RequestTimeout is 20s)")
}
