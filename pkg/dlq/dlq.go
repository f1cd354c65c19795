// Package dlq is the one home of the dead-letter contract (contract §4): the
// header names, their Spring-Kafka-compatible encodings (what Spring's
// DeadLetterPublishingRecoverer writes, so existing tooling reads them), the
// error categories, building a dead-letter record from the original and
// decoding one. The ingestor writes with it, dlq-replay and the dev tools
// read with it. It is plain data over pkg/record: no client library.
package dlq

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/pcp/route-processing/pkg/record"
)

// Header names (contract §4).
const (
	HeaderOriginalTopic         = "kafka_dlt-original-topic"
	HeaderOriginalPartition     = "kafka_dlt-original-partition"
	HeaderOriginalOffset        = "kafka_dlt-original-offset"
	HeaderOriginalTimestamp     = "kafka_dlt-original-timestamp"
	HeaderOriginalTimestampType = "kafka_dlt-original-timestamp-type"
	HeaderOriginalGroup         = "kafka_dlt-original-consumer-group"
	HeaderExceptionFQCN         = "kafka_dlt-exception-fqcn"
	HeaderExceptionMessage      = "kafka_dlt-exception-message"
	HeaderErrorCategory         = "pcp-error-category"
	HeaderErrorField            = "pcp-error-field"
	// HeaderValueOmitted is set, to the original value's size in bytes
	// (decimal text), on a dead-letter record whose value the DLQ topic
	// refused as too large and which was therefore sent without it.
	HeaderValueOmitted = "pcp-dlq-value-omitted-bytes"
	// HeaderKeyOmitted (the key's size in bytes) and HeaderHeadersOmitted
	// (how many headers) are set on a dead-letter record that the DLQ
	// topic refused as too large even without its value, and which was
	// therefore sent without the original's key and headers as well.
	HeaderKeyOmitted     = "pcp-dlq-key-omitted-bytes"
	HeaderHeadersOmitted = "pcp-dlq-headers-omitted"
)

// Prefixes of the headers that describe the dead-lettering rather than the
// record (a replay drops them all).
const (
	dltHeaderPrefix = "kafka_dlt-"
	pcpErrorPrefix  = "pcp-error-"
)

// Category is the value of the pcp-error-category header.
type Category string

const (
	// CategoryContract marks records that break the input contract.
	CategoryContract Category = "CONTRACT"
	// CategoryRetryable marks records the database refused after bounded
	// retries; replaying them later may succeed.
	CategoryRetryable Category = "RETRYABLE"
	// CategoryFatal marks records that failed for a reason that is neither
	// the producer's fault nor transient.
	CategoryFatal Category = "FATAL"
)

// Categories returns the valid categories, in the contract's order (a new
// slice each time: no caller can change the list another reads).
func Categories() []Category {
	return []Category{CategoryContract, CategoryRetryable, CategoryFatal}
}

// ParseCategory returns the category named s exactly, and whether there is
// one.
func ParseCategory(s string) (Category, bool) {
	for _, c := range Categories() {
		if string(c) == s {
			return c, true
		}
	}
	return "", false
}

// Exception class names of the kafka_dlt-exception-fqcn header.
const (
	FQCNContractViolation = "pcp.route.ContractViolation"
	FQCNDatabaseRejection = "pcp.route.DatabaseRejection"
)

// Reason says why a record is dead-lettered.
type Reason struct {
	// FQCN is the exception class name (kafka_dlt-exception-fqcn).
	FQCN string
	// Message is kafka_dlt-exception-message; it must not quote the
	// record's data.
	Message  string
	Category Category
	// Field is the failing field's path; empty leaves pcp-error-field out.
	Field string
}

// Letter is the dead-letter record of orig for topic: key, value and
// headers unchanged, the dead-letter headers appended.
func Letter(topic string, orig record.Record, group string, why Reason) record.Record {
	hs := make([]record.Header, 0, len(orig.Headers)+10)
	hs = append(hs, orig.Headers...)
	ts := int64(-1) // Spring's "no timestamp"
	if !orig.Timestamp.IsZero() {
		ts = orig.Timestamp.UnixMilli()
	}
	tsType := orig.TimestampType
	if tsType == "" || tsType == record.TimestampNone {
		// The client reports a record stored with timestamp -1 as having
		// no type; Java's consumer, whose type Spring writes, reads the
		// same record as CreateTime (every current-format batch has a
		// type), and the contract allows only CreateTime or LogAppendTime.
		tsType = record.TimestampCreateTime
	}
	hs = append(hs,
		record.Header{Key: HeaderOriginalTopic, Value: []byte(orig.Topic)},
		record.Header{Key: HeaderOriginalPartition, Value: binary.BigEndian.AppendUint32(nil, uint32(orig.Partition))},
		record.Header{Key: HeaderOriginalOffset, Value: binary.BigEndian.AppendUint64(nil, uint64(orig.Offset))},
		record.Header{Key: HeaderOriginalTimestamp, Value: binary.BigEndian.AppendUint64(nil, uint64(ts))},
		record.Header{Key: HeaderOriginalTimestampType, Value: []byte(tsType)},
		record.Header{Key: HeaderOriginalGroup, Value: []byte(group)},
		record.Header{Key: HeaderExceptionFQCN, Value: []byte(why.FQCN)},
		record.Header{Key: HeaderExceptionMessage, Value: []byte(why.Message)},
		record.Header{Key: HeaderErrorCategory, Value: []byte(why.Category)},
	)
	if why.Field != "" {
		hs = append(hs, record.Header{Key: HeaderErrorField, Value: []byte(why.Field)})
	}
	return record.Record{Topic: topic, Key: orig.Key, Value: orig.Value, Headers: hs}
}

// OmitValue returns letter without its value and with HeaderValueOmitted
// saying how large the value was. letter itself is not changed.
func OmitValue(letter record.Record) record.Record {
	out := letter
	out.Headers = append(append(make([]record.Header, 0, len(letter.Headers)+1), letter.Headers...),
		record.Header{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(letter.Value)))})
	out.Value = nil
	return out
}

// OmitOriginal returns letter (a Letter, with its value or without it)
// without the original record's key, headers and value, with
// HeaderKeyOmitted, HeaderHeadersOmitted and HeaderValueOmitted (OmitValue)
// saying what was left out; the dead-letter headers stay, and say where the
// original is. omitted is false, and letter returned as it is, when there
// is nothing to leave out. letter itself is not changed.
func OmitOriginal(letter record.Record) (_ record.Record, omitted bool) {
	start := 0 // the last dead-letter block: the headers before it are the original's
	for i, h := range letter.Headers {
		if h.Key == HeaderOriginalTopic {
			start = i
		}
	}
	if len(letter.Value) == 0 && len(letter.Key) == 0 && start == 0 {
		return letter, false
	}
	if len(letter.Value) > 0 {
		letter = OmitValue(letter)
	}
	out := letter
	out.Key = nil
	out.Headers = append(make([]record.Header, 0, len(letter.Headers)-start+2), letter.Headers[start:]...)
	if len(letter.Key) > 0 {
		out.Headers = append(out.Headers, record.Header{Key: HeaderKeyOmitted, Value: []byte(strconv.Itoa(len(letter.Key)))})
	}
	if start > 0 {
		out.Headers = append(out.Headers, record.Header{Key: HeaderHeadersOmitted, Value: []byte(strconv.Itoa(start))})
	}
	return out, true
}

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
	// Category is the header's text as found (it may be none of the
	// Category constants).
	Category Category
	Field    string
	// ValueOmittedBytes is the size of the value that was left out (0: the
	// value is there); KeyOmittedBytes the key's, and HeadersOmitted how
	// many of the original's headers were (OmitOriginal).
	ValueOmittedBytes int
	KeyOmittedBytes   int
	HeadersOmitted    int
}

// Incomplete reports whether the record was dead-lettered without part of
// the original (its value, key or headers): it cannot be replayed from the
// DLQ.
func (i Info) Incomplete() bool {
	return i.ValueOmittedBytes > 0 || i.KeyOmittedBytes > 0 || i.HeadersOmitted > 0
}

// Decode reads the dead-letter headers. Letter appends them after the
// original's as one block that starts with HeaderOriginalTopic, so each
// HeaderOriginalTopic starts the reading afresh: what came before it is
// the original record's, which may carry dead-letter headers of its own (a
// record dead-lettered, replayed by another tool without stripping, and
// dead-lettered again; or a producer's), and a header of that earlier block
// the latest one lacks (pcp-error-field, absent when the field is unknown)
// must not be read as the latest one's. Within a block, a header that
// occurs more than once is read last-wins. The exception headers are read
// last-wins over the whole record instead: Spring Kafka since 2.7.6 writes
// them before its kafka_dlt-original-* block (and strips earlier ones),
// and every letter, Spring's or Letter's, carries both, so the last of
// each is the latest letter's.
func Decode(hs []record.Header) Info {
	info := Info{OriginalPartition: -1, OriginalOffset: -1}
	for _, h := range hs {
		switch h.Key {
		case HeaderOriginalTopic:
			// A value (key, headers) left out of an earlier
			// dead-lettering is still missing: that header is the
			// record's, not the block's.
			info = Info{OriginalPartition: -1, OriginalOffset: -1, ValueOmittedBytes: info.ValueOmittedBytes,
				KeyOmittedBytes: info.KeyOmittedBytes, HeadersOmitted: info.HeadersOmitted,
				ExceptionFQCN: info.ExceptionFQCN, ExceptionMessage: info.ExceptionMessage}
			info.OriginalTopic = string(h.Value)
		case HeaderOriginalPartition:
			info.OriginalPartition = -1
			if len(h.Value) == 4 {
				info.OriginalPartition = int32(binary.BigEndian.Uint32(h.Value))
			}
		case HeaderOriginalOffset:
			info.OriginalOffset = -1
			if len(h.Value) == 8 {
				info.OriginalOffset = int64(binary.BigEndian.Uint64(h.Value))
			}
		case HeaderOriginalTimestamp:
			info.OriginalTimestamp = time.Time{}
			// -1 (or any negative value) means the original had none.
			if len(h.Value) == 8 {
				if ms := int64(binary.BigEndian.Uint64(h.Value)); ms >= 0 {
					info.OriginalTimestamp = time.UnixMilli(ms).UTC()
				}
			}
		case HeaderOriginalTimestampType:
			info.OriginalTimestampType = string(h.Value)
		case HeaderOriginalGroup:
			info.OriginalGroup = string(h.Value)
		case HeaderExceptionFQCN:
			info.ExceptionFQCN = string(h.Value)
		case HeaderExceptionMessage:
			info.ExceptionMessage = string(h.Value)
		case HeaderErrorCategory:
			info.Category = Category(h.Value)
		case HeaderErrorField:
			info.Field = string(h.Value)
		case HeaderValueOmitted:
			info.ValueOmittedBytes, _ = strconv.Atoi(string(h.Value))
		case HeaderKeyOmitted:
			info.KeyOmittedBytes, _ = strconv.Atoi(string(h.Value))
		case HeaderHeadersOmitted:
			info.HeadersOmitted, _ = strconv.Atoi(string(h.Value))
		}
	}
	return info
}

// IsHeader reports whether a header was added by dead-lettering
// (kafka_dlt-* or pcp-error-*) rather than carried from the original record.
// HeaderValueOmitted is not one: a replay of a record sent without its value
// keeps saying so. Header names are case-sensitive in Kafka, and so is this
// match.
func IsHeader(key string) bool {
	return strings.HasPrefix(key, dltHeaderPrefix) || strings.HasPrefix(key, pcpErrorPrefix)
}

// Strip returns the record's original headers, in their order: hs without
// the dead-letter headers. It returns nil when none is left.
func Strip(hs []record.Header) []record.Header {
	var out []record.Header
	for _, h := range hs {
		if !IsHeader(h.Key) {
			out = append(out, h)
		}
	}
	return out
}
