// Package record holds the Kafka record as the service's own packages see it:
// plain data without the client library, so that ingest and relay build
// and test without cgo. kafkax converts between it and
// confluent-kafka-go's message; nothing else does.
package record

import "time"

// Timestamp types as Kafka's Java client spells them (the DLQ header
// kafka_dlt-original-timestamp-type carries them verbatim).
const (
	TimestampCreateTime    = "CreateTime"
	TimestampLogAppendTime = "LogAppendTime"
	TimestampNone          = "NoTimestampType"
)

// Header is one record header. Kafka allows repeated keys; order is kept.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record, consumed or to be produced. A producer ignores
// Offset and the timestamp, and Partition unless Pinned (the partitioner
// picks the partition from Key).
type Record struct {
	Topic     string
	Partition int32
	// Pinned, on a record to produce, sends it to Partition.
	Pinned bool
	Offset int64
	// Key is nil for a null key.
	Key []byte
	// Value is nil for a null value (a tombstone).
	Value   []byte
	Headers []Header
	// Timestamp is zero when the broker gave none.
	Timestamp time.Time
	// TimestampType is one of the Timestamp* constants.
	TimestampType string
}

// Header returns the value of the last header named key, as Kafka's Java
// client's lastHeader does, and whether there was one.
func (r *Record) Header(key string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}
