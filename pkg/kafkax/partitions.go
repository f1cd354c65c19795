package kafkax

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/record"
)

// maxPartitionsNamed bounds the partitions DescribePartitions names, so that
// a topic of hundreds of troubled partitions makes a line, not a page.
const maxPartitionsNamed = 5

// DescribePartitions says what the cluster's metadata shows of topic,
// bounded by timeout and ctx: the topic's own error (unknown, say), else
// which partitions have no leader and which have fewer replicas in sync
// than they have replicas. It is for an operator reading why records were
// not delivered while a broker answers: librdkafka retries a refused
// produce (NOT_ENOUGH_REPLICAS, a leader moving) until message.timeout.ms
// and then reports only "Message timed out", not the broker's refusal. It
// fails only when no answer comes or the answer leaves the topic out.
func (pr *Producer) DescribePartitions(ctx context.Context, topic string, timeout time.Duration) (string, error) {
	ms, err := metadataWait(ctx, timeout)
	if err != nil {
		return "", err
	}
	c, err := pr.client()
	if err != nil {
		return "", err
	}
	defer c.release()
	md, err := c.p.GetMetadata(&topic, false, ms)
	if err != nil {
		return "", fmt.Errorf("kafka metadata of %s: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok {
		return "", &record.TopicError{Topic: topic, Err: errors.New("not in the brokers' answer")}
	}
	return describeTopic(tm), nil
}

// describeTopic renders the trouble of tm (see DescribePartitions): the
// topic's own error (unknown, no leader while it is being created), else
// its partitions', or says there is none to see.
func describeTopic(tm kafka.TopicMetadata) string {
	topic := tm.Topic
	if tm.Error.Code() != kafka.ErrNoError {
		return fmt.Sprintf("the metadata of %s: %v", topic, tm.Error)
	}
	parts := slices.Clone(tm.Partitions)
	slices.SortFunc(parts, func(a, b kafka.PartitionMetadata) int { return cmp.Compare(a.ID, b.ID) })
	var troubled []string
	for _, p := range parts {
		var s string
		switch {
		case p.Leader < 0 || p.Error.Code() == kafka.ErrLeaderNotAvailable:
			s = fmt.Sprintf("partition %d has no leader", p.ID)
		case len(p.Isrs) < len(p.Replicas):
			s = fmt.Sprintf("partition %d has %d of %d replicas in sync", p.ID, len(p.Isrs), len(p.Replicas))
		case p.Error.Code() != kafka.ErrNoError:
			s = fmt.Sprintf("partition %d: %v", p.ID, p.Error)
		default:
			continue
		}
		troubled = append(troubled, s)
	}
	switch {
	case len(troubled) == 0 && len(parts) == 1:
		return fmt.Sprintf("the metadata of %s shows a leader and every replica in sync for its one partition", topic)
	case len(troubled) == 0:
		return fmt.Sprintf("the metadata of %s shows a leader and every replica in sync for each of its %d partitions", topic, len(parts))
	case len(troubled) > maxPartitionsNamed:
		more := len(troubled) - maxPartitionsNamed
		troubled = append(troubled[:maxPartitionsNamed], fmt.Sprintf("%d more", more))
	}
	return fmt.Sprintf("the metadata of %s: %s", topic, strings.Join(troubled, "; "))
}
