package relay

import (
	"context"

	"github.com/pcp/route-processing/pkg/obs"
)

// Readiness components reported by the relay.
const (
	ComponentPostgres = "postgres"
	ComponentKafka    = "kafka" // the output's brokers
)

// setReady records component's state for /readyz: ready when reason is "".
func (r *Relay) setReady(component, reason string) {
	if r.cfg.Readiness == nil {
		return
	}
	r.cfg.Readiness.Set(component, reason)
}

// setDBReady records whether the database answers (err nil). /readyz
// answers whoever reaches the port, so it shows the kind of failure, not
// pgx's message, which names the user, the database and the host; the log
// has the whole error. during, when not "", says what was under way.
func (r *Relay) setDBReady(during string, err error) {
	r.dbByControl.Store(false)
	reason := obs.DBSymptom(err)
	if reason != "" && during != "" {
		reason = during + ": " + reason
	}
	r.setReady(ComponentPostgres, reason)
}

// dbFailed reports a failed database call (err, during as for setDBReady):
// "postgres" not ready until the next successful claim reports it ready
// again (claimsHealthy). The claim watermark's next full rescan comes as
// soon as its backoff allows: the failure may be a failover that lost
// marks (watermarked.rescanSoon).
func (r *Relay) dbFailed(during string, err error) {
	r.claimsHealthy.Store(false)
	if r.watermark != nil {
		r.watermark.rescanSoon()
	}
	r.setDBReady(during, err)
}

// setKafkaReady records whether a broker answers (err nil) for readiness.
// While the relays are paused it shows ready whatever the cluster does: a
// paused relay publishes nothing, so an unreachable cluster does not make
// it unusable, and an operator who paused for a Kafka incident gets quiet
// alerts (README, Deploy). The state is shown again on resume.
func (r *Relay) setKafkaReady(err error) {
	r.kafkaMu.Lock()
	defer r.kafkaMu.Unlock()
	r.kafkaErr = err
	r.showKafkaLocked()
}

// setKafkaLack records what the producer has lacked while a broker
// answers the probes (the leader of a partition it produces to;
// linkReporter), "" when nothing. It logs when a lack begins and when it
// ends, not each change of its text (a connection's state, named in it,
// cycles while the broker stays away).
func (r *Relay) setKafkaLack(ctx context.Context, lack string) {
	r.kafkaMu.Lock()
	defer r.kafkaMu.Unlock()
	if lack == r.kafkaLack {
		return
	}
	switch {
	case lack != "" && r.kafkaLack == "":
		r.logger.WarnContext(ctx, "kafka: a broker answers, but not the leaders of some partitions; their rows are postponed until it does", "problem", lack)
	case lack == "":
		r.logger.InfoContext(ctx, "kafka: the partitions' leaders are reachable again")
	}
	r.kafkaLack = lack
	r.showKafkaLocked()
}

// showKafkaReady applies the pause flag to the recorded cluster state.
func (r *Relay) showKafkaReady() {
	r.kafkaMu.Lock()
	defer r.kafkaMu.Unlock()
	r.showKafkaLocked()
}

// showKafkaLocked shows the recorded cluster state (a probe's error
// first, then what the producer lacks) as the "kafka" component, or ready
// while paused; r.kafkaMu is held.
func (r *Relay) showKafkaLocked() {
	reason := r.kafkaLack
	if r.kafkaErr != nil {
		reason = r.kafkaErr.Error()
	}
	if r.paused.Load() {
		reason = ""
	}
	r.setReady(ComponentKafka, reason)
}
