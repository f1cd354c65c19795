package kafkax

import (
	"context"
	"errors"
	"time"

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
// has been answered for, or once ctx ends and a request in flight has run
// out its wait (topicCheckWait). Brokers that create topics on demand
// (allow.auto.create.topics, the producer's default) create them for this
// request, as they would for the first write.
func (pr *Producer) WarnMissingTopics(ctx context.Context, topics []TopicUse) {
	bo := backoff.New(time.Second, 30*time.Second)
	for _, t := range topics {
		for ctx.Err() == nil {
			err := pr.Probe(ctx, t.Name, topicCheckWait)
			var topicErr *record.TopicError
			if errors.As(err, &topicErr) {
				pr.logger.WarnContext(ctx, "kafka: the brokers answer without a topic this process writes to; create it",
					"topic", t.Name, "variable", t.Var, "effect", t.Effect, "err", topicErr.Err)
			}
			if err == nil || topicErr != nil {
				break
			}
			backoff.Sleep(ctx, bo.Next()) // brokers not reached yet: their outage is reported elsewhere
		}
	}
}
