package kafkax

import (
	"context"
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/record"
)

// TopicUse is a topic a binary writes to: its name, the variable that set
// it, and what a missing topic costs (for the warning).
type TopicUse struct {
	Name   string
	Var    string
	Effect string
}

// topicCheckWait bounds one metadata request of WarnMissingTopics; the
// check repeats, with backoff, until the brokers answer. A request runs out
// its wait even after ctx ends, and the producer's Close waits for it: it
// is short so that a stop while the brokers are away is not held up (a
// reachable broker answers in milliseconds; on a link slower than this the
// warning is only late or missing, nothing else depends on it).
const topicCheckWait = 2 * time.Second

// WarnMissingTopics asks the brokers, once they answer, for each topic's
// metadata and logs a warning for each they answer without. Without it a
// missing topic a binary only writes to shows first when something is
// written to it: a DLQ topic at the first invalid record, an output topic
// as rows failing their attempts minutes later. It changes nothing else
// (readiness follows the writes themselves) and returns when every topic
// has been answered for, the producer is closed, or once ctx ends and a
// request in flight has run out its wait (topicCheckWait). Brokers that
// create topics on demand (allow.auto.create.topics, the producer's
// default) create them for this request, as they would for the first
// write, and answer "leader not available" until the new topic has a
// leader: that is asked again, up to leaderlessTries times, before it is
// warned of.
func (pr *Producer) WarnMissingTopics(ctx context.Context, topics []TopicUse) {
	bo := backoff.New(time.Second, 30*time.Second)
	for _, t := range topics {
		for leaderless := 0; ctx.Err() == nil; {
			err := pr.Probe(ctx, t.Name, topicCheckWait)
			var topicErr *record.TopicError
			var kerr kafka.Error
			switch {
			case err == nil:
			case errors.Is(err, errClosed):
				return
			case errors.As(err, &topicErr) && errors.As(topicErr.Err, &kerr) &&
				kerr.Code() == kafka.ErrLeaderNotAvailable && leaderless < leaderlessTries:
				leaderless++
				backoff.Sleep(ctx, leaderlessWait)
				continue
			case topicErr != nil:
				pr.logger.WarnContext(ctx, "kafka: a topic this process writes to cannot be used (create it, or grant this client access)",
					"topic", t.Name, "variable", t.Var, "effect", t.Effect, "err", topicErr.Err)
			default:
				backoff.Sleep(ctx, bo.Next()) // brokers not reached yet: their outage is reported elsewhere
				continue
			}
			break
		}
	}
}

// A topic just created on demand has no leader for a moment (Apache
// Kafka: tens of milliseconds to seconds); leaderlessTries × leaderlessWait
// is how long WarnMissingTopics gives it.
const (
	leaderlessTries = 10
	leaderlessWait  = 500 * time.Millisecond
)
