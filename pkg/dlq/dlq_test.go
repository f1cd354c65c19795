package dlq

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/record"
)

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func h(k string, v []byte) record.Header { return record.Header{Key: k, Value: v} }

// dlqHeaders are headers as the ingestor (and Spring Kafka) write them.
func dlqHeaders(category Category, field string) []record.Header {
	return []record.Header{
		h(HeaderOriginalTopic, []byte("pcp.request.survey-georeference.v1")),
		h(HeaderOriginalPartition, be32(3)),
		h(HeaderOriginalOffset, be64(1234)),
		h(HeaderOriginalTimestamp, be64(1777371300000)),
		h(HeaderOriginalTimestampType, []byte("CreateTime")),
		h(HeaderOriginalGroup, []byte("pcp-route-processing-service")),
		h(HeaderExceptionFQCN, []byte("ContractError")),
		h(HeaderExceptionMessage, []byte("data.geometry: ring not closed")),
		h(HeaderErrorCategory, []byte(category)),
		h(HeaderErrorField, []byte(field)),
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		headers []record.Header
		want    Info
	}{
		{
			name:    "all headers",
			headers: dlqHeaders("CONTRACT", "data.geometry.coordinates[0][3]"),
			want: Info{
				OriginalTopic:         "pcp.request.survey-georeference.v1",
				OriginalPartition:     3,
				OriginalOffset:        1234,
				OriginalTimestamp:     time.Date(2026, 4, 28, 10, 15, 0, 0, time.UTC),
				OriginalTimestampType: "CreateTime",
				OriginalGroup:         "pcp-route-processing-service",
				ExceptionFQCN:         "ContractError",
				ExceptionMessage:      "data.geometry: ring not closed",
				Category:              "CONTRACT",
				Field:                 "data.geometry.coordinates[0][3]",
			},
		},
		{
			name:    "no headers",
			headers: nil,
			want:    Info{OriginalPartition: -1, OriginalOffset: -1},
		},
		{
			name: "big-endian, not little-endian, and full width",
			headers: []record.Header{
				h(HeaderOriginalPartition, []byte{0, 0, 1, 2}),
				h(HeaderOriginalOffset, []byte{0, 0, 0, 1, 0, 0, 0, 2}),
				h(HeaderOriginalTimestamp, []byte{0, 0, 0, 0, 0, 0, 0x03, 0xe8}),
			},
			want: Info{OriginalPartition: 258, OriginalOffset: 1<<32 + 2, OriginalTimestamp: time.Unix(1, 0).UTC()},
		},
		{
			name: "wrong widths are unknown, not misread",
			headers: []record.Header{
				h(HeaderOriginalPartition, be64(3)),
				h(HeaderOriginalOffset, be32(7)),
				h(HeaderOriginalTimestamp, []byte("1777371300000")),
			},
			want: Info{OriginalPartition: -1, OriginalOffset: -1},
		},
		{
			name:    "timestamp -1: the original had none",
			headers: []record.Header{h(HeaderOriginalTimestamp, be64(-1)), h(HeaderOriginalTimestampType, []byte("NoTimestampType"))},
			want:    Info{OriginalPartition: -1, OriginalOffset: -1, OriginalTimestampType: "NoTimestampType"},
		},
		{
			name: "a malformed later header overrides an earlier valid one",
			headers: []record.Header{
				h(HeaderOriginalPartition, be32(3)),
				h(HeaderOriginalPartition, nil),
			},
			want: Info{OriginalPartition: -1, OriginalOffset: -1},
		},
		{
			name: "repeated headers: the last one wins",
			headers: append(dlqHeaders("RETRYABLE", "old"),
				h(HeaderErrorCategory, []byte("CONTRACT")),
				h(HeaderErrorField, []byte("data.id")),
				h(HeaderOriginalOffset, be64(99)),
			),
			want: func() Info {
				i := Decode(dlqHeaders("CONTRACT", "data.id"))
				i.OriginalOffset = 99
				return i
			}(),
		},
		{
			name: "a block's absent field is not taken from an earlier block",
			headers: append(dlqHeaders("RETRYABLE", "data.properties.platform"),
				dlqHeaders("CONTRACT", "")[:9]...),
			want: Info{
				OriginalTopic: "pcp.request.survey-georeference.v1", OriginalPartition: 3, OriginalOffset: 1234,
				OriginalTimestamp: time.Date(2026, 4, 28, 10, 15, 0, 0, time.UTC), OriginalTimestampType: "CreateTime",
				OriginalGroup: "pcp-route-processing-service", ExceptionFQCN: "ContractError",
				ExceptionMessage: "data.geometry: ring not closed", Category: "CONTRACT",
			},
		},
		{
			name: "a value omitted before stays omitted",
			headers: append(append(dlqHeaders("RETRYABLE", "x"), h(HeaderValueOmitted, []byte("1048600"))),
				dlqHeaders("CONTRACT", "")[:9]...),
			want: Info{
				OriginalTopic: "pcp.request.survey-georeference.v1", OriginalPartition: 3, OriginalOffset: 1234,
				OriginalTimestamp: time.Date(2026, 4, 28, 10, 15, 0, 0, time.UTC), OriginalTimestampType: "CreateTime",
				OriginalGroup: "pcp-route-processing-service", ExceptionFQCN: "ContractError",
				ExceptionMessage: "data.geometry: ring not closed", Category: "CONTRACT", ValueOmittedBytes: 1048600,
			},
		},
		{
			name: "names are case-sensitive",
			headers: []record.Header{
				h("PCP-ERROR-CATEGORY", []byte("CONTRACT")),
				h("Kafka_dlt-original-topic", []byte("x")),
			},
			want: Info{OriginalPartition: -1, OriginalOffset: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Decode(tt.headers))
		})
	}
}

func TestStrip(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		headers []record.Header
		want    []record.Header
	}{
		{name: "none", headers: nil, want: nil},
		{
			name:    "only dead-letter headers",
			headers: dlqHeaders("CONTRACT", "data"),
			want:    nil,
		},
		{
			name: "original headers kept in order, values untouched, duplicates kept",
			headers: append([]record.Header{
				h("traceparent", []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
				h("b", []byte{0, 1, 2}),
				h("b", nil),
			}, append(dlqHeaders("CONTRACT", "data"),
				h("pcp-error-something-new", []byte("x")),
				h("kafka_dlt-exception-stacktrace", []byte("x")),
				h("after", []byte("z")),
			)...),
			want: []record.Header{
				h("traceparent", []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
				h("b", []byte{0, 1, 2}),
				h("b", nil),
				h("after", []byte("z")),
			},
		},
		{
			name: "similar names that are not dead-letter headers are kept",
			headers: []record.Header{
				h("kafka_dlt", []byte("1")),
				h("pcp-error", []byte("2")),
				h("x-pcp-error-category", []byte("3")),
				h("kafka_original-topic", []byte("4")),
			},
			want: []record.Header{
				h("kafka_dlt", []byte("1")),
				h("pcp-error", []byte("2")),
				h("x-pcp-error-category", []byte("3")),
				h("kafka_original-topic", []byte("4")),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Strip(tt.headers))
		})
	}
}

// FuzzDecode: header values come from whoever wrote to the DLQ; no
// value may panic the decoder, and stripping keeps only non-DLQ headers.
func FuzzDecode(f *testing.F) {
	f.Add(HeaderOriginalPartition, []byte{0, 0, 0, 3})
	f.Add(HeaderOriginalOffset, []byte{1, 2, 3})
	f.Add(HeaderOriginalTimestamp, be64(-1))
	f.Add("traceparent", []byte("x"))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		hs := []record.Header{h(key, value), h(HeaderErrorCategory, value)}
		_ = Decode(hs)
		for _, s := range Strip(hs) {
			if IsHeader(s.Key) {
				t.Fatalf("kept %q", s.Key)
			}
		}
	})
}

// A record that arrives carrying dead-letter headers (a producer's, or an
// earlier dead-lettering's that a replay kept) is decoded as this
// dead-lettering says: with no field known, none, not the one it carried.
// The carried headers stay on the record, as contract §4 keeps them.
func TestDecodeReadsTheLatestLetter(t *testing.T) {
	t.Parallel()
	orig := record.Record{Topic: "in", Partition: 1, Offset: 2, Value: []byte("not json"),
		Headers: []record.Header{
			h(HeaderErrorField, []byte("data.properties.platform")),
			h(HeaderErrorCategory, []byte("RETRYABLE")),
			h(HeaderExceptionMessage, []byte("spoof")),
		}}
	l := Letter("dlq", orig, "group", Reason{FQCN: FQCNContractViolation, Message: "record value is not valid JSON", Category: CategoryContract})
	info := Decode(l.Headers)
	require.Empty(t, info.Field)
	require.Equal(t, CategoryContract, info.Category)
	require.Equal(t, "record value is not valid JSON", info.ExceptionMessage)
	require.Equal(t, orig.Headers, l.Headers[:len(orig.Headers)])
}

// A letter of Spring Kafka 2.7.6 or later: its exception headers come
// before its kafka_dlt-original-* block (DeadLetterRecordManager writes
// them first). Decode read them as an earlier block's and dropped them.
func TestDecodeSpringLetter(t *testing.T) {
	t.Parallel()
	info := Decode([]record.Header{
		h("app-header", []byte("kept")),
		h(HeaderExceptionFQCN, []byte("org.springframework.kafka.listener.ListenerExecutionFailedException")),
		h("kafka_dlt-exception-cause-fqcn", []byte("java.lang.IllegalStateException")),
		h(HeaderExceptionMessage, []byte("Listener failed; bad route")),
		h("kafka_dlt-exception-stacktrace", []byte("java.lang.IllegalStateException: bad route\n\tat ...")),
		h(HeaderOriginalTopic, []byte("in")),
		h(HeaderOriginalPartition, be32(2)),
		h(HeaderOriginalOffset, be64(77)),
		h(HeaderOriginalGroup, []byte("spring-group")),
	})
	require.Equal(t, "org.springframework.kafka.listener.ListenerExecutionFailedException", info.ExceptionFQCN)
	require.Equal(t, "Listener failed; bad route", info.ExceptionMessage)
	require.Equal(t, "in", info.OriginalTopic)
	require.EqualValues(t, 2, info.OriginalPartition)
	require.EqualValues(t, 77, info.OriginalOffset)
	require.Equal(t, "spring-group", info.OriginalGroup)
	require.Empty(t, info.Category, "Spring writes no pcp-error-category")
}

// What Letter writes, Decode reads back, and Strip gives back the
// original headers: the writer and the readers agree on names and
// encodings.
func TestLetterRoundTrip(t *testing.T) {
	t.Parallel()
	orig := record.Record{
		Topic: "in", Partition: 7, Offset: 1<<40 + 5,
		Key: []byte("k"), Value: []byte(`{"x":1}`),
		Headers:   []record.Header{{Key: "traceparent", Value: []byte("00-a-b-01")}, {Key: "b", Value: nil}},
		Timestamp: time.UnixMilli(1777371300123), TimestampType: record.TimestampCreateTime,
	}
	why := Reason{FQCN: FQCNContractViolation, Message: "data.id: missing", Category: CategoryContract, Field: "data.id"}
	l := Letter("dlq", orig, "group", why)
	require.Equal(t, "dlq", l.Topic)
	require.Equal(t, orig.Key, l.Key)
	require.Equal(t, orig.Value, l.Value)
	require.Equal(t, Info{
		OriginalTopic: "in", OriginalPartition: 7, OriginalOffset: 1<<40 + 5,
		OriginalTimestamp: time.UnixMilli(1777371300123).UTC(), OriginalTimestampType: record.TimestampCreateTime,
		OriginalGroup: "group", ExceptionFQCN: FQCNContractViolation, ExceptionMessage: "data.id: missing",
		Category: CategoryContract, Field: "data.id",
	}, Decode(l.Headers))
	require.Equal(t, orig.Headers, Strip(l.Headers))

	// Spring's encodings, byte for byte.
	v, _ := l.Header(HeaderOriginalPartition)
	require.Equal(t, []byte{0, 0, 0, 7}, v)
	v, _ = l.Header(HeaderOriginalTimestamp)
	require.Equal(t, be64(1777371300123), v)

	// No timestamp, no field: -1 and CreateTime (what Java's consumer
	// reads such a record as), no field header.
	orig.Timestamp, orig.TimestampType = time.Time{}, ""
	why.Field = ""
	l = Letter("dlq", orig, "group", why)
	v, _ = l.Header(HeaderOriginalTimestamp)
	require.Equal(t, be64(-1), v)
	info := Decode(l.Headers)
	require.True(t, info.OriginalTimestamp.IsZero())
	require.Equal(t, record.TimestampCreateTime, info.OriginalTimestampType)
	orig.TimestampType = record.TimestampNone
	require.Equal(t, record.TimestampCreateTime, Decode(Letter("dlq", orig, "group", why).Headers).OriginalTimestampType)
	_, hasField := l.Header(HeaderErrorField)
	require.False(t, hasField)

	// Without the value: the size is told, the rest is kept, the input
	// letter is untouched.
	o := OmitValue(l)
	require.Nil(t, o.Value)
	require.Equal(t, len(orig.Value), Decode(o.Headers).ValueOmittedBytes)
	require.Equal(t, l.Headers, o.Headers[:len(l.Headers)])
	require.Len(t, l.Headers, len(o.Headers)-1)
	require.NotNil(t, l.Value)
}

func TestParseCategory(t *testing.T) {
	t.Parallel()
	for _, c := range Categories() {
		got, ok := ParseCategory(string(c))
		require.True(t, ok)
		require.Equal(t, c, got)
	}
	_, ok := ParseCategory("contract")
	require.False(t, ok, "compared exactly")
}

// OmitOriginal leaves out the original's key, headers and value (an
// earlier dead-lettering's block carried in the original's headers too),
// keeps the latest dead-letter block, says what it left out, and leaves
// its input untouched; a letter with nothing to leave out comes back as is.
func TestOmitOriginal(t *testing.T) {
	t.Parallel()
	earlier := Letter("dlq", record.Record{Topic: "in", Offset: 1, Key: []byte("k"), Value: []byte("v")}, "g", Reason{Category: CategoryRetryable})
	orig := record.Record{Topic: "in", Partition: 3, Offset: 9, Key: []byte("kkk"), Value: []byte(`{"x":1}`),
		Headers: append([]record.Header{{Key: "traceparent", Value: []byte("00-a-b-01")}}, earlier.Headers...)}
	l := Letter("dlq", orig, "group", Reason{FQCN: FQCNContractViolation, Message: "m", Category: CategoryContract, Field: "data.id"})
	before := slices.Clone(l.Headers)

	for _, in := range []record.Record{l, OmitValue(l)} {
		out, ok := OmitOriginal(in)
		require.True(t, ok)
		require.Nil(t, out.Key)
		require.Nil(t, out.Value)
		info := Decode(out.Headers)
		require.Equal(t, Info{OriginalTopic: "in", OriginalPartition: 3, OriginalOffset: 9, OriginalTimestampType: record.TimestampCreateTime,
			OriginalGroup: "group", ExceptionFQCN: FQCNContractViolation, ExceptionMessage: "m", Category: CategoryContract, Field: "data.id",
			ValueOmittedBytes: 7, KeyOmittedBytes: 3, HeadersOmitted: len(orig.Headers)}, info)
		require.True(t, info.Incomplete())
		block := len(l.Headers) - len(orig.Headers)
		require.Equal(t, l.Headers[len(orig.Headers):], out.Headers[:block], "the latest block is kept as it was")
		var rest []string
		for _, h := range out.Headers[block:] {
			rest = append(rest, h.Key)
		}
		require.Equal(t, []string{HeaderValueOmitted, HeaderKeyOmitted, HeaderHeadersOmitted}, rest, "then what was left out, and no original header")
	}
	require.Equal(t, before, l.Headers, "the input letter is untouched")
	require.Equal(t, orig.Key, l.Key)

	bare := Letter("dlq", record.Record{Topic: "in"}, "group", Reason{Category: CategoryContract})
	out, ok := OmitOriginal(bare)
	require.False(t, ok, "no key, header or value to leave out")
	require.Equal(t, bare, out)
	require.False(t, Decode(out.Headers).Incomplete())
}
