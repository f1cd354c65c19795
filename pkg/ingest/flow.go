package ingest

import (
	"context"
	"time"
)

// flowControl pauses every assigned partition while a dependency is down
// or too much waits for a batch slot, and resumes them afterwards. A failed
// pause or resume is logged and tried again on the next pass.
func (in *Ingestor) flowControl(ctx context.Context) {
	outage := in.outage()
	full := in.overfull()
	low := len(in.pending) < max(in.cfg.PauseRecords/2, in.cfg.BatchSize)
	in.ownedMu.RLock()
	var toPause, toResume []int32
	for p := range in.owned {
		switch {
		case (outage || full) && !in.paused[p]:
			toPause = append(toPause, p)
		case !outage && low && in.paused[p]:
			toResume = append(toResume, p)
		}
	}
	in.ownedMu.RUnlock()
	if len(toPause) > 0 {
		if err := in.consumer.Pause(toPause); err != nil {
			in.logger.WarnContext(ctx, "pause failed", "partitions", toPause, "err", err)
		} else {
			for _, p := range toPause {
				in.paused[p] = true
			}
			in.logger.DebugContext(ctx, "paused partitions", "partitions", toPause, "outage", outage)
		}
	}
	if len(toResume) > 0 {
		if err := in.consumer.Resume(toResume); err != nil {
			in.logger.WarnContext(ctx, "resume failed", "partitions", toResume, "err", err)
		} else {
			for _, p := range toResume {
				delete(in.paused, p)
			}
			in.logger.DebugContext(ctx, "resumed partitions", "partitions", toResume)
		}
	}
}

// outage reports whether a dependency is down (consumption pauses).
func (in *Ingestor) outage() bool {
	return in.dbHealth.outage.Load() || in.dlqHealth.outage.Load()
}

// holding reports whether no batch may start: a dependency is down, or the
// database has not answered yet since start. The latter pauses no
// partition (pausing one while the consumer still fetches its start offset
// left it stuck in a test run); the records wait in pending, and past
// PauseRecords the partitions pause as for any backlog.
func (in *Ingestor) holding() bool {
	return in.dbHealth.holding() || in.dlqHealth.holding()
}

// overfull reports whether too much waits for a batch slot (consumption
// pauses).
func (in *Ingestor) overfull() bool {
	return len(in.pending) >= in.cfg.PauseRecords || in.pendingBytes >= in.cfg.PauseBytes
}

// updateLag refreshes the lag gauges, at most once a second.
func (in *Ingestor) updateLag() {
	if time.Since(in.lagAt) < time.Second {
		return
	}
	in.lagAt = time.Now()
	for _, p := range in.tracker.Partitions() {
		high, ok := in.consumer.HighWatermark(p)
		if !ok {
			continue
		}
		base := in.tracker.LagBase(p)
		if base < 0 {
			continue
		}
		in.metrics.setLag(p, max(high-base, 0))
	}
}
