package ingest

import "context"

// flowControl pauses every assigned partition while a dependency is down
// or too much waits for a batch slot, and resumes them afterwards. A failed
// pause or resume is logged and tried again on the next pass.
func (in *Ingestor) flowControl(ctx context.Context) {
	outage := in.outage()
	hold := in.mustPause()
	// Both measures must be down to half (records: at least a batch's
	// worth): by count alone, a backlog over PauseBytes in large records
	// was resumed on the pass after its pause, and grew past it.
	low := len(in.pending) < max(in.cfg.PauseRecords/2, in.cfg.BatchSize) &&
		in.pendingBytes < in.cfg.PauseBytes/2
	in.ownedMu.RLock()
	var toPause, toResume []int32
	for p := range in.owned {
		switch {
		case hold && !in.paused[p]:
			toPause = append(toPause, p)
		case !outage && low && in.paused[p]:
			toResume = append(toResume, p)
		}
	}
	in.ownedMu.RUnlock()
	if len(toPause) > 0 {
		in.pause(ctx, toPause)
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

// mustPause reports whether consumption is held back: a dependency is
// down, or too much waits for a batch slot.
func (in *Ingestor) mustPause() bool { return in.outage() || in.overfull() }

// pause pauses parts; a failure is logged, and flowControl tries again on
// its next pass.
func (in *Ingestor) pause(ctx context.Context, parts []int32) {
	if err := in.consumer.Pause(parts); err != nil {
		in.logger.WarnContext(ctx, "pause failed", "partitions", parts, "err", err)
		return
	}
	for _, p := range parts {
		in.paused[p] = true
	}
	in.logger.DebugContext(ctx, "paused partitions", "partitions", parts, "outage", in.outage())
}

// outage reports whether a dependency is down (consumption pauses).
func (in *Ingestor) outage() bool {
	return in.dbHealth.outage.Load() || in.dlqHealth.outage.Load()
}

// blocksBatches reports whether no batch may start: a dependency is down, or the
// database has not answered yet since start. The latter pauses no
// partition (pausing one while the consumer still fetches its start offset
// left it stuck in a test run); the records wait in pending, and past
// PauseRecords the partitions pause as for any backlog.
func (in *Ingestor) blocksBatches() bool {
	return in.dbHealth.blocksBatches() || in.dlqHealth.blocksBatches()
}

// overfull reports whether too much waits for a batch slot (consumption
// pauses).
func (in *Ingestor) overfull() bool {
	return len(in.pending) >= in.cfg.PauseRecords || in.pendingBytes >= in.cfg.PauseBytes
}
