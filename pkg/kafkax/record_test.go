package kafkax

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/record"
)

func TestToRecord(t *testing.T) {
	t.Parallel()
	topic := "in"
	ts := time.UnixMilli(1777371300123)
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 2, Offset: 41},
		Key:            []byte("k"), Value: []byte("v"),
		Headers:   []kafka.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}},
		Timestamp: ts, TimestampType: kafka.TimestampCreateTime,
	}
	require.Equal(t, record.Record{
		Topic: "in", Partition: 2, Offset: 41, Key: []byte("k"), Value: []byte("v"),
		Headers:   []record.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}},
		Timestamp: ts, TimestampType: record.TimestampCreateTime,
	}, toRecord("fallback", m))

	m.TimestampType = kafka.TimestampLogAppendTime
	require.Equal(t, record.TimestampLogAppendTime, toRecord("", m).TimestampType)

	// No timestamp type: no timestamp either; no topic: the fallback.
	m.TimestampType, m.TopicPartition.Topic, m.Headers = kafka.TimestampNotAvailable, nil, nil
	r := toRecord("fallback", m)
	require.Equal(t, record.TimestampNone, r.TimestampType)
	require.True(t, r.Timestamp.IsZero())
	require.Equal(t, "fallback", r.Topic)
	require.Nil(t, r.Headers)
}
