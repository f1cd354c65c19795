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
// check repeats, with backoff, until the brokers answer.
const topicCheckWait = 5 * time.Second

// WarnMissingTopics asks the brokers, once they answer, for each topic's
// metadata and logs a warning for each they answer without. Without it a
// missing topic a binary only writes to shows first when something is
// written to it: a DLQ topic at the first invalid record, an output topic
// as rows failing their attempts minutes later. It changes nothing else
// (readiness follows the writes themselves) and returns when every topic
// has been answered for, or ctx ends. Brokers that create topics on demand
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
