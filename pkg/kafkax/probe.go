package kafkax

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
)

// topicMissing returns a *record.TopicError when md lacks topic or holds it
// with an error of the topic's own (unknown, not authorised, still being
// created; partition-level errors are not looked at): the brokers
// answered, but the topic cannot be used.
func topicMissing(md *kafka.Metadata, topic string) error {
	tm, ok := md.Topics[topic]
	if !ok {
		return &record.TopicError{Topic: topic, Err: errors.New("not in the brokers' answer")}
	}
	if tm.Error.Code() != kafka.ErrNoError {
		return &record.TopicError{Topic: topic, Err: tm.Error}
	}
	return nil
}

// metadataClient is the metadata request of librdkafka's clients, producer
// and consumer alike.
type metadataClient interface {
	GetMetadata(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)
}

// probe asks client for topic's metadata (the cluster's alone when topic
// is ""), bounded by timeout and ctx: an answer that lists no broker is
// record.ErrUnavailable, one without the topic a *record.TopicError
// (topicMissing).
func probe(ctx context.Context, client metadataClient, topic string, timeout time.Duration) error {
	ms, err := metadataWait(ctx, timeout)
	if err != nil {
		return err
	}
	var tp *string
	if topic != "" {
		tp = &topic
	}
	md, err := client.GetMetadata(tp, false, ms)
	if err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return fmt.Errorf("kafka metadata: no brokers: %w", record.ErrUnavailable)
	}
	if topic != "" {
		return topicMissing(md, topic)
	}
	return nil
}

// metadataWait is the wait, in the whole milliseconds librdkafka takes, of
// a metadata request bounded by timeout and by ctx's deadline; ctx's error
// when ctx is done or its deadline has come.
func metadataWait(ctx context.Context, timeout time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return 0, context.DeadlineExceeded
	}
	return max(int(timeout.Milliseconds()), 1), nil
}
