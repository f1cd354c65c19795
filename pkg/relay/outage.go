package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/record"
)

// confirmOutage probes the cluster after an unavailable error. It returns
// nil when a broker answers, and record.ErrUnavailable at once when an
// outage is confirmed already; otherwise it enters outage mode (claims
// stop, the prober runs until a broker answers) and returns the probe's
// error, unless ctx ended meanwhile (see below).
func (r *Relay) confirmOutage(ctx context.Context, cause error) error {
	r.probing.Lock()
	defer r.probing.Unlock()
	if r.kafkaDown.Load() {
		return record.ErrUnavailable // another worker confirmed it already
	}
	err := r.probeCluster(ctx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// The caller is gone: a stalled batch whose reports came while
		// the probe waited (its context ends with it), or a stopping
		// relay. The reports are the answer the probe was for; taking
		// the probe's failure for an outage gave the leases back over a
		// slow link whenever a batch ended while its stall probe waited.
		return err
	}
	r.kafkaDown.Store(true)
	r.m.kafkaOutages.Inc()
	r.setKafkaReady(probeFailure(err))
	msg := "kafka unreachable; claims stopped, probing"
	if errors.Is(err, record.ErrClientUnusable) {
		msg = "kafka producer unusable; claims stopped, probing"
	}
	r.logger.ErrorContext(ctx, msg, "err", cause, "probe_err", err)
	select {
	case r.outage <- struct{}{}:
	default: // the prober has one waiting already
	}
	return err
}

// probeFailure is the "kafka" component's reason after a failed probe:
// no broker answered, unless the publisher's own client is what cannot be
// used (record.ErrClientUnusable), whose error says why.
func probeFailure(err error) error {
	if errors.Is(err, record.ErrClientUnusable) {
		return err
	}
	return fmt.Errorf("no broker answers: %w", err)
}

// linkReporter is a Publisher that can tell, from its client's own
// connections, that a broker answers the probe but not the leader of a
// partition it has records for (their rows are postponed over and over
// while deliveries to the other partitions keep the relay from probing);
// *kafkax.Producer implements it. watchKafka reads it every
// idleProbeEvery.
type linkReporter interface {
	// LinkProblem says what has been lacking for a while, "" when
	// nothing.
	LinkProblem() string
}

// idleProbeEvery is how often the relay probes the cluster while no batch
// has been delivered for as long: without it an idle relay (the ingestor
// behind the same dead link writes nothing) would stay ready through a
// Kafka outage until its next batch. One metadata request a second is
// nothing for a broker; a relay whose batches each take under a second
// sends none.
const idleProbeEvery = time.Second

// watchKafka probes the cluster at start, and again after every outage a
// worker confirms, until a broker answers, and probes an idle relay's
// cluster every idleProbeEvery, when it also reads what the producer lacks
// (linkReporter); it runs for as long as Run.
func (r *Relay) watchKafka(ctx context.Context) {
	r.probe(ctx, false)
	idle := time.NewTicker(idleProbeEvery)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.outage:
			r.probe(ctx, true)
		case <-idle.C:
			// A paused relay has nothing to deliver: its readiness does
			// not follow the cluster (setKafkaReady), so no idle check.
			if !r.kafkaDown.Load() && !r.paused.Load() && time.Since(time.Unix(0, r.lastDelivery.Load())) >= idleProbeEvery {
				_ = r.confirmOutage(ctx, errors.New("idle check: no batch delivered lately"))
			}
			if lr, ok := r.pub.(linkReporter); ok {
				r.setKafkaLack(ctx, lr.LinkProblem())
			}
		}
	}
}

// probe asks the cluster with capped exponential backoff until a broker
// answers, then lets the workers claim again. It stops with ctx.
func (r *Relay) probe(ctx context.Context, inOutage bool) {
	bo := backoff.New(min(250*time.Millisecond, r.cfg.ProbeMaxBackoff), r.cfg.ProbeMaxBackoff)
	if inOutage {
		// The failed probe that confirmed the outage was the first one.
		backoff.Sleep(ctx, min(250*time.Millisecond, r.cfg.ProbeMaxBackoff))
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := r.probeCluster(ctx)
		if err == nil {
			r.kafkaDown.Store(false)
			r.setKafkaReady(nil)
			if inOutage || attempt > 1 {
				if r.paused.Load() {
					r.logger.InfoContext(ctx, "kafka reachable; claims wait for `outbox-relay resume`", "probes", attempt)
				} else {
					r.logger.InfoContext(ctx, "kafka reachable; claiming", "probes", attempt)
				}
			}
			r.Wake()
			return
		}
		if attempt == 1 && !inOutage {
			r.setKafkaReady(probeFailure(err))
			r.logger.ErrorContext(ctx, "kafka unreachable at start; probing", "err", err)
		} else {
			r.logger.DebugContext(ctx, "kafka probe failed", "err", err, "attempt", attempt)
		}
		backoff.Sleep(ctx, bo.Next())
	}
}

// probeCluster asks the cluster for metadata. Its wait for the answer
// (r.patience) grows on a link too slow for the configured bound, which
// would otherwise fail every probe and keep the relay out of work for good.
func (r *Relay) probeCluster(ctx context.Context) error {
	return r.patience.Run(ctx, func(ctx context.Context) error {
		return r.pub.Probe(ctx, "", r.cfg.probeWaitMax()) // ctx bounds it to the patience's wait
	})
}
