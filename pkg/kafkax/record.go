package kafkax

import (
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
)

// toRecord converts a consumed message; topic is used when the message
// names none. It is the one place that maps librdkafka's timestamp types to
// the names Kafka's Java client uses.
func toRecord(topic string, m *kafka.Message) record.Record {
	r := record.Record{
		Topic:     topic,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Key:       m.Key,
		Value:     m.Value,
	}
	if m.TopicPartition.Topic != nil {
		r.Topic = *m.TopicPartition.Topic
	}
	if len(m.Headers) > 0 {
		r.Headers = make([]record.Header, len(m.Headers))
		for i, h := range m.Headers {
			r.Headers[i] = record.Header{Key: h.Key, Value: h.Value}
		}
	}
	switch m.TimestampType {
	case kafka.TimestampCreateTime:
		r.TimestampType, r.Timestamp = record.TimestampCreateTime, m.Timestamp
	case kafka.TimestampLogAppendTime:
		r.TimestampType, r.Timestamp = record.TimestampLogAppendTime, m.Timestamp
	default:
		r.TimestampType = record.TimestampNone
	}
	return r
}
