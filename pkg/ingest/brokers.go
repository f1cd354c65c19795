package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/record"
)

// brokerProbeEvery is how often watchBrokers asks for metadata: one request
// a second is nothing for a broker, and bounds noticing a hung link (bytes
// held, no RST) to about 3 s and the brokers' return to about 1 s.
const brokerProbeEvery = time.Second

// watchBrokers keeps the "kafka" readiness component current until ctx
// ends. The consumer itself rides out broker outages, but an operator (and
// Kubernetes) should see that nothing can be consumed: no broker answers,
// the input topic is missing, or the brokers that answer are not those the
// consumer needs (linkReporter). Each probe waits probeTimeout, longer on
// a link slower than that and twice as long after each probe in a row
// without an answer (backoff.Patience, up to probeWaitMax), so a slow link
// that works is not reported down for good.
func (in *Ingestor) watchBrokers(ctx context.Context) {
	patience := backoff.NewPatience(probeTimeout, probeWaitMax)
	probe := func(ctx context.Context) error {
		return in.consumer.Probe(ctx, probeWaitMax) // ctx bounds it to the patience's wait
	}
	logged := brokersUnknown // "not probed yet" (New)
	for {
		err := patience.Run(ctx, probe)
		if err != nil && ctx.Err() != nil {
			return
		}
		state, reason := brokersUp, ""
		var lack string
		if lr, ok := in.consumer.(linkReporter); ok {
			lack = lr.LinkProblem()
		}
		var topicErr *record.TopicError
		switch {
		case errors.As(err, &topicErr):
			state, reason = brokersWithoutTopic, "input "+topicErr.Error()
		case err != nil:
			state, reason = brokersUnreachable, "brokers unreachable: "+err.Error()
			if lack != "" {
				// A broker that holds requests unanswered also takes the
				// probes sent to it: the probe's timeout alone would
				// hide which broker is silent while another answers.
				reason += "; " + lack
			}
		case lack != "":
			state, reason = brokersLacking, lack
		}
		// The reason names the probe's wait, which grows while the brokers
		// stay away: one line per change of state, not of reason. The line
		// goes before the readiness it explains, so whoever sees the state
		// change finds its line already written.
		if state != logged {
			logged = state
			switch state {
			case brokersWithoutTopic:
				in.logger.WarnContext(ctx, "kafka: the brokers answer without the input topic; nothing is consumed", "err", err)
			case brokersUnreachable:
				in.logger.WarnContext(ctx, "kafka unreachable; records wait in the topic", "err", err)
			case brokersLacking:
				in.logger.WarnContext(ctx, "kafka: a broker answers, but not the ones this consumer needs; records wait in the topic", "problem", reason)
			default:
				in.logger.InfoContext(ctx, "kafka reachable")
			}
		}
		in.ready.Set(ComponentKafka, reason)
		if !backoff.Sleep(ctx, brokerProbeEvery) {
			return
		}
	}
}

// brokersState is what watchBrokers last logged of the input's brokers.
type brokersState int

const (
	brokersUnknown brokersState = iota
	brokersUp
	brokersUnreachable
	brokersWithoutTopic
	brokersLacking // a broker answers, but not the coordinator or a leader the consumer needs
)

// linkReporter is a Consumer that can tell, from its client's own
// connections, that a broker answers the probe but not the ones it needs
// (its group's coordinator, its partitions' leaders); *kafkax.Consumer
// implements it.
type linkReporter interface {
	// LinkProblem says what has been lacking for a while, "" when
	// nothing.
	LinkProblem() string
}
