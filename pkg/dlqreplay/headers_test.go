package dlqreplay

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/kafkax"
)

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func h(k string, v []byte) kafkax.Header { return kafkax.Header{Key: k, Value: v} }

// dlqHeaders are headers as the ingestor (and Spring Kafka) write them.
func dlqHeaders(category, field string) []kafkax.Header {
	return []kafkax.Header{
		h(ingest.HeaderOriginalTopic, []byte("pcp.request.survey-georeference.v1")),
		h(ingest.HeaderOriginalPartition, be32(3)),
		h(ingest.HeaderOriginalOffset, be64(1234)),
		h(ingest.HeaderOriginalTimestamp, be64(1777371300000)),
		h(ingest.HeaderOriginalTimestampType, []byte("CreateTime")),
		h(ingest.HeaderOriginalGroup, []byte("pcp-route-processing-service")),
		h(ingest.HeaderExceptionFQCN, []byte("ContractError")),
		h(ingest.HeaderExceptionMessage, []byte("data.geometry: ring not closed")),
		h(ingest.HeaderErrorCategory, []byte(category)),
		h(ingest.HeaderErrorField, []byte(field)),
	}
}

func TestDecodeInfo(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		headers []kafkax.Header
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
			headers: []kafkax.Header{
				h(ingest.HeaderOriginalPartition, []byte{0, 0, 1, 2}),
				h(ingest.HeaderOriginalOffset, []byte{0, 0, 0, 1, 0, 0, 0, 2}),
				h(ingest.HeaderOriginalTimestamp, []byte{0, 0, 0, 0, 0, 0, 0x03, 0xe8}),
			},
			want: Info{OriginalPartition: 258, OriginalOffset: 1<<32 + 2, OriginalTimestamp: time.Unix(1, 0).UTC()},
		},
		{
			name: "wrong widths are unknown, not misread",
			headers: []kafkax.Header{
				h(ingest.HeaderOriginalPartition, be64(3)),
				h(ingest.HeaderOriginalOffset, be32(7)),
				h(ingest.HeaderOriginalTimestamp, []byte("1777371300000")),
			},
			want: Info{OriginalPartition: -1, OriginalOffset: -1},
		},
		{
			name:    "timestamp -1: the original had none",
			headers: []kafkax.Header{h(ingest.HeaderOriginalTimestamp, be64(-1)), h(ingest.HeaderOriginalTimestampType, []byte("NoTimestampType"))},
			want:    Info{OriginalPartition: -1, OriginalOffset: -1, OriginalTimestampType: "NoTimestampType"},
		},
		{
			name: "a malformed later header overrides an earlier valid one",
			headers: []kafkax.Header{
				h(ingest.HeaderOriginalPartition, be32(3)),
				h(ingest.HeaderOriginalPartition, nil),
			},
			want: Info{OriginalPartition: -1, OriginalOffset: -1},
		},
		{
			name: "repeated headers: the last one wins",
			headers: append(dlqHeaders("RETRYABLE", "old"),
				h(ingest.HeaderErrorCategory, []byte("CONTRACT")),
				h(ingest.HeaderErrorField, []byte("data.id")),
				h(ingest.HeaderOriginalOffset, be64(99)),
			),
			want: func() Info {
				i := DecodeInfo(dlqHeaders("CONTRACT", "data.id"))
				i.OriginalOffset = 99
				return i
			}(),
		},
		{
			name: "names are case-sensitive",
			headers: []kafkax.Header{
				h("PCP-ERROR-CATEGORY", []byte("CONTRACT")),
				h("Kafka_dlt-original-topic", []byte("x")),
			},
			want: Info{OriginalPartition: -1, OriginalOffset: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, DecodeInfo(tt.headers))
		})
	}
}

func TestStripDLQHeaders(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		headers []kafkax.Header
		want    []kafkax.Header
	}{
		{name: "none", headers: nil, want: nil},
		{
			name:    "only dead-letter headers",
			headers: dlqHeaders("CONTRACT", "data"),
			want:    nil,
		},
		{
			name: "original headers kept in order, values untouched, duplicates kept",
			headers: append([]kafkax.Header{
				h("traceparent", []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
				h("b", []byte{0, 1, 2}),
				h("b", nil),
			}, append(dlqHeaders("CONTRACT", "data"),
				h("pcp-error-something-new", []byte("x")),
				h("kafka_dlt-exception-stacktrace", []byte("x")),
				h("after", []byte("z")),
			)...),
			want: []kafkax.Header{
				h("traceparent", []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
				h("b", []byte{0, 1, 2}),
				h("b", nil),
				h("after", []byte("z")),
			},
		},
		{
			name: "similar names that are not dead-letter headers are kept",
			headers: []kafkax.Header{
				h("kafka_dlt", []byte("1")),
				h("pcp-error", []byte("2")),
				h("x-pcp-error-category", []byte("3")),
				h("kafka_original-topic", []byte("4")),
			},
			want: []kafkax.Header{
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
			require.Equal(t, tt.want, StripDLQHeaders(tt.headers))
		})
	}
}

// FuzzDecodeInfo: header values come from whoever wrote to the DLQ; no
// value may panic the decoder, and stripping keeps only non-DLQ headers.
func FuzzDecodeInfo(f *testing.F) {
	f.Add(ingest.HeaderOriginalPartition, []byte{0, 0, 0, 3})
	f.Add(ingest.HeaderOriginalOffset, []byte{1, 2, 3})
	f.Add(ingest.HeaderOriginalTimestamp, be64(-1))
	f.Add("traceparent", []byte("x"))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		hs := []kafkax.Header{h(key, value), h(ingest.HeaderErrorCategory, value)}
		_ = DecodeInfo(hs)
		for _, s := range StripDLQHeaders(hs) {
			if IsDLQHeader(s.Key) {
				t.Fatalf("kept %q", s.Key)
			}
		}
	})
}
