package relay

import (
	"context"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
)

// worker claims, publishes and marks batches until ctx ends. It claims
// nothing while Kafka is down (the prober wakes it) and backs off while
// PostgreSQL cannot be reached.
func (r *Relay) worker(ctx context.Context, id int, wake chan struct{}) {
	log := r.logger.With("worker", id)
	dbWait := backoff.New(100*time.Millisecond, r.cfg.ProbeMaxBackoff)
	for ctx.Err() == nil {
		if r.kafkaDown.Load() {
			sleep(ctx, wake, r.cfg.PollInterval)
			continue
		}
		rows, more, err := r.outbox.Claim(ctx, r.cfg.BatchSize, r.cfg.MaxClaimBytes, r.cfg.LockTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := dbWait.Next()
			if !r.dbDown.Swap(true) {
				log.ErrorContext(ctx, "cannot claim outbox rows; retrying", "err", err, "retry_in", wait)
			}
			r.dbUp.Store(false)
			r.setReady("postgres", err)
			backoff.Sleep(ctx, wait)
			continue
		}
		dbWait.Reset()
		if !r.dbUp.Load() {
			r.dbUp.Store(true)
			if r.dbDown.Swap(false) {
				log.InfoContext(ctx, "database reachable again")
			}
			r.setReady("postgres", nil)
		}
		if len(rows) == 0 {
			sleep(ctx, wake, r.cfg.PollInterval)
			continue
		}
		r.m.claimedRows.Observe(float64(len(rows)))
		r.process(ctx, rows)
		if len(rows) < r.cfg.BatchSize && !more {
			sleep(ctx, wake, r.cfg.PollInterval)
		}
	}
}

// sleep waits for a wake, d, or the end of ctx.
func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}
