package relay

import (
	"context"
	"time"
)

// watchControl reads the pause flag every poll interval for the paused gauge
// and the log; the claim itself honours the flag.
func (r *Relay) watchControl(ctx context.Context) {
	nowAndEvery(ctx, r.cfg.PollInterval, func() { r.readControl(ctx) })
}

// readControl reads the pause flag once and shows a change.
func (r *Relay) readControl(ctx context.Context) {
	c, cancel := r.dbCall(ctx)
	control, err := r.outbox.Control(c)
	cancel()
	r.showDBWhileNoClaims(ctx, err)
	paused := control.Paused
	if err == nil && r.paused.Swap(paused) != paused {
		r.showKafkaReady()
		if paused {
			r.m.paused.Set(1)
			r.logger.WarnContext(ctx, "paused by an operator; no new claims until `outbox-relay resume`",
				"reason", control.Reason, "by", control.UpdatedBy, "since", control.UpdatedAt.UTC().Format(time.RFC3339))
		} else {
			r.m.paused.Set(0)
			r.logger.InfoContext(ctx, "resumed")
			r.Wake()
		}
	}
}

// showDBWhileNoClaims reports the database's state from the pause-flag
// read while no claim runs (Kafka down, so claims wait): otherwise
// /readyz would say "not connected yet" of a database that answers, or of
// one that was never migrated. A failure of the read is shown as any
// other; a success clears only what the read itself (or the start) showed,
// never a failure another call reported (a release retried until its
// lease ends, a write refused while reads pass), which would make /readyz
// alternate. Once claims run, they own the state.
func (r *Relay) showDBWhileNoClaims(ctx context.Context, err error) {
	if !r.kafkaDown.Load() || ctx.Err() != nil {
		return
	}
	if err != nil {
		r.dbFailed("read the pause flag", err)
		r.dbByControl.Store(true)
		return
	}
	if r.dbByControl.Load() {
		r.setDBReady("", nil)
		r.dbByControl.Store(true)
	}
}
