package ingest

import (
	"encoding/binary"
)

// Dead-letter headers, named and encoded as Spring Kafka's
// DeadLetterPublishingRecoverer writes them (contract §4), so existing
// tooling reads them.
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
)

// dlqMessage copies rec (key, value and headers unchanged) and appends the
// dead-letter headers.
func dlqMessage(rec Record, group string, l letter) DLQMessage {
	hs := make([]Header, 0, len(rec.Headers)+10)
	hs = append(hs, rec.Headers...)
	ts := int64(-1)
	if !rec.Timestamp.IsZero() {
		ts = rec.Timestamp.UnixMilli()
	}
	tsType := rec.TimestampType
	if tsType == "" {
		tsType = "NoTimestampType"
	}
	hs = append(hs,
		Header{HeaderOriginalTopic, []byte(rec.Topic)},
		Header{HeaderOriginalPartition, binary.BigEndian.AppendUint32(nil, uint32(rec.Partition))},
		Header{HeaderOriginalOffset, binary.BigEndian.AppendUint64(nil, uint64(rec.Offset))},
		Header{HeaderOriginalTimestamp, binary.BigEndian.AppendUint64(nil, uint64(ts))},
		Header{HeaderOriginalTimestampType, []byte(tsType)},
		Header{HeaderOriginalGroup, []byte(group)},
		Header{HeaderExceptionFQCN, []byte(l.fqcn)},
		Header{HeaderExceptionMessage, []byte(l.message)},
		Header{HeaderErrorCategory, []byte(l.category)},
	)
	if l.field != "" {
		hs = append(hs, Header{HeaderErrorField, []byte(l.field)})
	}
	return DLQMessage{Key: rec.Key, Value: rec.Value, Headers: hs}
}
