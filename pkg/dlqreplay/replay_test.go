package dlqreplay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/record"
)

// fakeReader serves records from memory with the semantics of kafkax.Reader.
type fakeReader struct {
	topic   string
	parts   map[int32][]record.Record // offsets are the slice indexes plus low
	low     map[int32]int64
	ranges  []record.PartitionRange // what ReadRanges was asked for
	sinceAt time.Time               // what OffsetForTime was asked for
}

func (f *fakeReader) Partitions(_ context.Context, topic string) ([]int32, error) {
	if topic != f.topic {
		return nil, errors.New("unknown topic")
	}
	var ids []int32
	for p := range int32(len(f.parts)) {
		ids = append(ids, p)
	}
	return ids, nil
}

func (f *fakeReader) Watermarks(_ context.Context, _ string, p int32) (int64, int64, error) {
	return f.low[p], f.low[p] + int64(len(f.parts[p])), nil
}

func (f *fakeReader) OffsetForTime(_ context.Context, _ string, p int32, t time.Time) (int64, bool, error) {
	f.sinceAt = t
	for _, r := range f.parts[p] {
		if !r.Timestamp.Before(t) {
			return r.Offset, true, nil
		}
	}
	return 0, false, nil
}

func (f *fakeReader) ReadRanges(_ context.Context, _ string, ranges []record.PartitionRange, fn func(record.Record) error) error {
	f.ranges = append(f.ranges, ranges...)
	for _, rg := range ranges {
		for _, r := range f.parts[rg.Partition] {
			if r.Offset >= rg.Start && r.Offset < rg.End {
				if err := fn(r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fakeProducer records what it is given; fail picks the messages to refuse.
// interrupt, when set, is called first (a stop arriving while the batch is
// sent), and every message of a batch sent after ctx ended is not attempted.
type fakeProducer struct {
	batches   [][]record.Record
	fail      func(record.Record) bool
	interrupt func()
}

func (f *fakeProducer) ProduceBatch(ctx context.Context, msgs []record.Record) []error {
	if f.interrupt != nil {
		f.interrupt()
	}
	f.batches = append(f.batches, append([]record.Record(nil), msgs...))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		switch {
		case ctx.Err() != nil:
			errs[i] = fmt.Errorf("%w: %w", record.ErrNotAttempted, ctx.Err())
		case f.fail != nil && f.fail(m):
			errs[i] = errors.New("broker says no")
		}
	}
	return errs
}

func (f *fakeProducer) sent() []record.Record {
	var out []record.Record
	for _, b := range f.batches {
		out = append(out, b...)
	}
	return out
}

type testBundle struct {
	reader   *fakeReader
	producer *fakeProducer
	out      *bytes.Buffer
}

const secret = "SECRET-PAYLOAD"

// setup builds a two-partition DLQ:
//
//	p0 @10 CONTRACT data.geometry   key k0  t0
//	p0 @11 RETRYABLE data.id        key nil t0+1h
//	p0 @12 CONTRACT (no field)      key k2  t0+2h
//	p1 @0  CONTRACT data.properties key k3  t0+30m, null value
//	p1 @1  FATAL                    key k4  t0+3h
func setup(t *testing.T) *testBundle {
	t.Helper()
	mk := func(p int32, off int64, key []byte, value []byte, ts time.Time, category dlq.Category, field string) record.Record {
		hs := []record.Header{h("traceparent", []byte("tp-"+string(key)))}
		hs = append(hs, dlqHeaders(category, field)...) // no field: no field header
		return record.Record{Topic: "dlq", Partition: p, Offset: off, Key: key, Value: value, Headers: hs, Timestamp: ts, TimestampType: "CreateTime"}
	}
	val := []byte(`{"data":"` + secret + `"}`)
	return &testBundle{
		reader: &fakeReader{
			topic: "dlq",
			low:   map[int32]int64{0: 10, 1: 0},
			parts: map[int32][]record.Record{
				0: {
					mk(0, 10, []byte("k0"), val, t0, dlq.CategoryContract, "data.geometry"),
					mk(0, 11, nil, val, t0.Add(time.Hour), dlq.CategoryRetryable, "data.id"),
					mk(0, 12, []byte("k2"), val, t0.Add(2*time.Hour), dlq.CategoryContract, ""),
				},
				1: {
					mk(1, 0, []byte("k3"), nil, t0.Add(30*time.Minute), dlq.CategoryContract, "data.properties"),
					mk(1, 1, []byte("k4"), val, t0.Add(3*time.Hour), dlq.CategoryFatal, "data"),
				},
			},
		},
		producer: &fakeProducer{},
		out:      &bytes.Buffer{},
	}
}

func (b *testBundle) run(t *testing.T, cfg Config) (Result, error) {
	t.Helper()
	return b.runCtx(t, context.Background(), cfg)
}

func (b *testBundle) runCtx(t *testing.T, ctx context.Context, cfg Config) (Result, error) {
	t.Helper()
	cfg.DLQTopic, cfg.Topic = "dlq", "input"
	var producer Producer = b.producer
	if cfg.DryRun {
		producer = nil
	}
	rp, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), b.reader, producer, b.out, cfg)
	require.NoError(t, err)
	return rp.Run(ctx)
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("replays selected records with original key, value and headers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.run(t, Config{Filter: Filter{Category: dlq.CategoryContract}})
		require.NoError(t, err)
		require.Equal(t, Result{Scanned: 5, Selected: 3, Replayed: 3, Skipped: 2}, res)

		sent := b.producer.sent()
		require.Len(t, sent, 3)
		for _, m := range sent {
			require.Equal(t, "input", m.Topic)
			require.Len(t, m.Headers, 1, "only the original traceparent header is left")
			require.Equal(t, "traceparent", m.Headers[0].Key)
			require.Equal(t, "tp-"+string(m.Key), string(m.Headers[0].Value))
		}
		require.Equal(t, []string{"k0", "k2", "k3"}, []string{string(sent[0].Key), string(sent[1].Key), string(sent[2].Key)})
		require.Contains(t, string(sent[0].Value), secret)
		require.Nil(t, sent[2].Value, "a null value stays null")

		out := b.out.String()
		require.Equal(t, 3, strings.Count(out, "replayed dlq_partition="), out)
		require.NotContains(t, out, secret, "values are never printed")
	})

	t.Run("a null key stays null", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.run(t, Config{Filter: Filter{Category: dlq.CategoryRetryable}})
		require.NoError(t, err)
		sent := b.producer.sent()
		require.Len(t, sent, 1)
		require.Nil(t, sent[0].Key)
		require.Contains(t, b.out.String(), "key=null")
	})

	t.Run("batches in DLQ order", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.run(t, Config{BatchSize: 2})
		require.NoError(t, err)
		require.Equal(t, Result{Scanned: 5, Selected: 5, Replayed: 5}, res)
		require.Len(t, b.producer.batches, 3)
		require.Equal(t, []int{2, 2, 1}, []int{len(b.producer.batches[0]), len(b.producer.batches[1]), len(b.producer.batches[2])})
		lines := strings.Split(strings.TrimSpace(b.out.String()), "\n")
		require.Len(t, lines, 5)
		for _, line := range lines {
			require.True(t, strings.HasPrefix(line, "replayed "), line)
		}
		require.Regexp(t, `(?s)dlq_offset=10 .*dlq_offset=11 .*dlq_offset=12 .*dlq_partition=1 dlq_offset=0 .*dlq_partition=1 dlq_offset=1 `, b.out.String())
	})

	t.Run("dry run sends nothing and lists the selection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.run(t, Config{DryRun: true, Filter: Filter{Partitions: []int32{0}, FieldPrefix: "data.geo"}})
		require.NoError(t, err)
		require.Equal(t, Result{Scanned: 3, Selected: 1, Skipped: 2}, res)
		require.Empty(t, b.producer.batches)
		out := b.out.String()
		require.Equal(t,
			`would-replay dlq_partition=0 dlq_offset=10 dlq_time=2026-04-28T10:00:00Z original_topic="pcp.request.survey-georeference.v1" original_partition=3 original_offset=1234 original_time=2026-04-28T10:15:00Z category="CONTRACT" field="data.geometry" exception="data.geometry: ring not closed" key_bytes=2 key_sha256=d1a5ac9a value_bytes=25`+"\n", // sha256("k0") begins d1a5ac9a
			out)
		require.Equal(t, []record.PartitionRange{{Partition: 0, Start: 10, End: 13}}, b.reader.ranges)
	})

	t.Run("offset and time bounds narrow what is read", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.run(t, Config{DryRun: true, Filter: Filter{FromOffset: 1, EndOffset: 12, Since: t0.Add(45 * time.Minute)}})
		require.NoError(t, err)
		require.Equal(t, t0.Add(45*time.Minute), b.reader.sinceAt)
		require.Equal(t, []record.PartitionRange{{Partition: 0, Start: 11, End: 12}, {Partition: 1, Start: 1, End: 2}}, b.reader.ranges)
		require.Equal(t, Result{Scanned: 2, Selected: 2}, res)
	})

	t.Run("stops after the first batch with a failed delivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.producer.fail = func(m record.Record) bool { return string(m.Key) == "k0" }
		res, err := b.run(t, Config{BatchSize: 2})
		require.ErrorIs(t, err, ErrDeliveryFailed)
		require.Equal(t, Result{Scanned: 2, Selected: 2, Replayed: 1, Failed: 1}, res)
		require.Len(t, b.producer.batches, 1)
		require.Contains(t, b.out.String(), `failed dlq_partition=0 dlq_offset=10 `)
		require.Contains(t, b.out.String(), `err="broker says no"`)
	})

	// A stop while a batch is sent says the replay was interrupted, not
	// that the brokers refused the records.
	t.Run("a stop mid-batch says interrupted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.producer.interrupt = cancel
		res, err := b.runCtx(t, ctx, Config{BatchSize: 2})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrDeliveryFailed)
		require.ErrorContains(t, err, "interrupted with 2 of 2 records")
		require.Equal(t, 2, res.Failed)
	})

	t.Run("a record held without its value is not replayed", func(t *testing.T) {
		t.Parallel()
		for _, dry := range []bool{false, true} {
			b := setup(t)
			omitted := dlq.OmitValue(b.reader.parts[0][0])
			omitted.Partition, omitted.Offset = 0, 10
			b.reader.parts[0][0] = omitted
			res, err := b.run(t, Config{DryRun: dry, Filter: Filter{Partitions: []int32{0}}})
			require.NoError(t, err)
			want := Result{Scanned: 3, Selected: 3, Replayed: 2, Omitted: 1}
			if dry {
				want.Replayed = 0
			}
			require.Equal(t, want, res, "dry run %v", dry)
			for _, m := range b.producer.sent() {
				require.NotNil(t, m.Value, "an empty record was sent")
			}
			require.Contains(t, b.out.String(), "cannot-replay dlq_partition=0 dlq_offset=10 ")
			require.Contains(t, b.out.String(), " value_omitted_bytes=25 ")
			require.Contains(t, res.String(), " omitted=1")
		}
	})

	t.Run("a tombstone held without its key is not replayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tomb := b.reader.parts[0][0]
		tomb.Value = nil
		bare, ok := dlq.OmitOriginal(tomb)
		require.True(t, ok)
		bare.Partition, bare.Offset = 0, 10
		b.reader.parts[0][0] = bare
		res, err := b.run(t, Config{Filter: Filter{Partitions: []int32{0}}})
		require.NoError(t, err)
		require.Equal(t, Result{Scanned: 3, Selected: 3, Replayed: 2, Omitted: 1}, res)
		for _, m := range b.producer.sent() {
			require.NotNil(t, m.Value, "the tombstone, without its key, was sent")
		}
		require.Contains(t, b.out.String(), "cannot-replay dlq_partition=0 dlq_offset=10 ")
		require.Contains(t, b.out.String(), " key_omitted_bytes=")
	})

	t.Run("unknown partition", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.run(t, Config{Filter: Filter{Partitions: []int32{7}}})
		require.ErrorIs(t, err, ErrNoSuchPartition)
		require.Empty(t, b.reader.ranges)
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name    string
		cfg     Config
		prod    Producer
		wantErr string
	}{
		{name: "target is the DLQ", cfg: Config{DLQTopic: "d", Topic: "d"}, prod: &fakeProducer{}, wantErr: "is the DLQ topic"},
		{name: "target is an output topic", cfg: Config{DLQTopic: "d", Topic: "o2", OutputTopics: []string{"o1", "o2"}}, prod: &fakeProducer{}, wantErr: "is an output topic"},
		{name: "no target", cfg: Config{DLQTopic: "d"}, prod: &fakeProducer{}, wantErr: "no target topic"},
		{name: "no producer", cfg: Config{DLQTopic: "d", Topic: "i"}, wantErr: "no producer"},
		{name: "bad filter", cfg: Config{DLQTopic: "d", Topic: "i", Filter: Filter{Category: "X"}}, prod: &fakeProducer{}, wantErr: `category "X"`},
		{name: "dry run needs no producer", cfg: Config{DLQTopic: "d", Topic: "i", DryRun: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(logger, &fakeReader{}, tt.prod, io.Discard, tt.cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func h(k string, v []byte) record.Header { return record.Header{Key: k, Value: v} }

// dlqHeaders are headers as the ingestor writes them (dlq.Letter).
func dlqHeaders(category dlq.Category, field string) []record.Header {
	orig := record.Record{
		Topic: "pcp.request.survey-georeference.v1", Partition: 3, Offset: 1234,
		Timestamp: time.UnixMilli(1777371300000), TimestampType: record.TimestampCreateTime,
	}
	why := dlq.Reason{FQCN: dlq.FQCNContractViolation, Message: "data.geometry: ring not closed", Category: category, Field: field}
	return dlq.Letter("dlq", orig, "pcp-route-processing-service", why).Headers
}

// A record's line names its key by size and fingerprint, never its bytes
// (a key may be anything, user data included), and another producer's
// exception message (a Spring listener's may quote the payload) by its
// size; this service's own, which names fields and rules, in full.
func TestDescribeShowsNoKeyOrForeignException(t *testing.T) {
	t.Parallel()
	key := []byte(`{"customer":"Ivan Petrov"}`)
	foreign := record.Record{Key: key, Value: []byte("{}"), Headers: []record.Header{
		{Key: dlq.HeaderExceptionMessage, Value: []byte(`Cannot deserialize value "Ivan Petrov"`)},
	}}
	line := describe(foreign, dlq.Decode(foreign.Headers))
	require.NotContains(t, line, "Ivan")
	require.Contains(t, line, fmt.Sprintf(" exception_bytes=%d key_bytes=%d key_sha256=", len(`Cannot deserialize value "Ivan Petrov"`), len(key)))

	own := foreign
	own.Headers = append([]record.Header{{Key: dlq.HeaderErrorCategory, Value: []byte("CONTRACT")}}, own.Headers[0])
	own.Headers[1].Value = []byte("data.id: required")
	line = describe(own, dlq.Decode(own.Headers))
	require.NotContains(t, line, "Ivan")
	require.Contains(t, line, ` exception="data.id: required" key_bytes=`)
}
