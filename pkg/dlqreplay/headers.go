package dlqreplay

import (
	"encoding/binary"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/kafkax"
)

// The dead-letter header names are the ingestor's, which writes them
// (ingest.Header*, contract §4).
const (
	// Headers with these prefixes describe the dead-lettering, not the
	// record; a replay drops them all.
	dltHeaderPrefix = "kafka_dlt-"
	pcpErrorPrefix  = "pcp-error-"
)

// Error categories (header pcp-error-category).
const (
	CategoryContract  = "CONTRACT"
	CategoryRetryable = "RETRYABLE"
	CategoryFatal     = "FATAL"
)

// Info is what the dead-letter headers say about a record. A header that is
// absent or malformed leaves its field at the zero value, or -1 for the
// original partition and offset.
type Info struct {
	OriginalTopic         string
	OriginalPartition     int32
	OriginalOffset        int64
	OriginalTimestamp     time.Time
	OriginalTimestampType string
	OriginalGroup         string
	ExceptionFQCN         string
	ExceptionMessage      string
	Category              string
	Field                 string
}

// DecodeInfo reads the dead-letter headers. When a header occurs more than
// once, the last one wins: a record that was dead-lettered, replayed by
// another tool without stripping, and dead-lettered again carries the old
// headers first and the latest ones after them.
func DecodeInfo(hs []kafkax.Header) Info {
	info := Info{OriginalPartition: -1, OriginalOffset: -1}
	for _, h := range hs {
		switch h.Key {
		case ingest.HeaderOriginalTopic:
			info.OriginalTopic = string(h.Value)
		case ingest.HeaderOriginalPartition:
			info.OriginalPartition = -1
			if len(h.Value) == 4 {
				info.OriginalPartition = int32(binary.BigEndian.Uint32(h.Value))
			}
		case ingest.HeaderOriginalOffset:
			info.OriginalOffset = -1
			if len(h.Value) == 8 {
				info.OriginalOffset = int64(binary.BigEndian.Uint64(h.Value))
			}
		case ingest.HeaderOriginalTimestamp:
			info.OriginalTimestamp = time.Time{}
			// -1 (or any negative value) means the original had none.
			if len(h.Value) == 8 {
				if ms := int64(binary.BigEndian.Uint64(h.Value)); ms >= 0 {
					info.OriginalTimestamp = time.UnixMilli(ms).UTC()
				}
			}
		case ingest.HeaderOriginalTimestampType:
			info.OriginalTimestampType = string(h.Value)
		case ingest.HeaderOriginalGroup:
			info.OriginalGroup = string(h.Value)
		case ingest.HeaderExceptionFQCN:
			info.ExceptionFQCN = string(h.Value)
		case ingest.HeaderExceptionMessage:
			info.ExceptionMessage = string(h.Value)
		case ingest.HeaderErrorCategory:
			info.Category = string(h.Value)
		case ingest.HeaderErrorField:
			info.Field = string(h.Value)
		}
	}
	return info
}

// IsDLQHeader reports whether a header was added by dead-lettering
// (kafka_dlt-* or pcp-error-*) rather than carried from the original record.
// Header names are case-sensitive in Kafka, and so is this match.
func IsDLQHeader(key string) bool {
	return strings.HasPrefix(key, dltHeaderPrefix) || strings.HasPrefix(key, pcpErrorPrefix)
}

// StripDLQHeaders returns the record's original headers, in their order:
// hs without the dead-letter headers. It returns nil when none is left.
func StripDLQHeaders(hs []kafkax.Header) []kafkax.Header {
	var out []kafkax.Header
	for _, h := range hs {
		if !IsDLQHeader(h.Key) {
			out = append(out, h)
		}
	}
	return out
}
