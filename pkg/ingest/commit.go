package ingest

import (
	"context"
	"fmt"
	"time"
)

// commitCall is one Commit running on a goroutine of its own.
type commitCall struct {
	offsets map[int32]int64
	epochs  map[int32]uint64 // assignment epoch of each partition
	done    chan error       // buffered: the goroutine never blocks
}

// commit commits the committable offsets of parts (nil: every tracked
// partition). Commit runs on a goroutine of its own, at most one at a time,
// so a coordinator that does not answer never stalls the poll loop; commit
// waits for it up to wait (0: not at all, a later pass takes the result).
// After a failure the poll loop tries again only after a backoff; force
// (revocation, shutdown) tries at once.
func (in *Ingestor) commit(ctx context.Context, parts []int32, wait time.Duration, force bool) {
	if in.hookErr != nil {
		return
	}
	deadline := time.Now().Add(wait)
	if in.commitRun != nil && !in.awaitCommit(ctx, deadline) {
		if force {
			in.logger.WarnContext(ctx, "an offset commit is still running; not committing again (records past the last committed offset will be redelivered)", "timeout", wait)
		}
		return
	}
	if !force && in.commitFailing && time.Now().Before(in.commitNext) {
		return
	}
	if !force && in.commitWait() > 0 {
		return
	}
	if parts == nil {
		parts = in.tracker.Partitions()
	}
	offsets := map[int32]int64{}
	epochs := map[int32]uint64{}
	for _, p := range parts {
		if off, ok := in.tracker.Committable(p); ok {
			offsets[p] = off
			epochs[p], _ = in.ownedEpoch(p)
		}
	}
	if len(offsets) == 0 {
		return
	}
	if in.cfg.BeforeCommit != nil {
		if err := in.cfg.BeforeCommit(offsets); err != nil {
			in.hookErr = fmt.Errorf("%w: %w", errCommitHook, err)
			return
		}
	}
	c := &commitCall{offsets: offsets, epochs: epochs, done: make(chan error, 1)}
	in.commitRun = c
	in.commitLast = time.Now()
	go func() { c.done <- in.consumer.Commit(offsets) }()
	if !in.awaitCommit(ctx, deadline) && force {
		in.logger.WarnContext(ctx, "offset commit did not finish in time; records past the last committed offset will be redelivered", "timeout", wait)
	}
}

// commitWait is how long CommitInterval still holds the next commit back
// (0: it may go now).
func (in *Ingestor) commitWait() time.Duration {
	if in.cfg.CommitInterval <= 0 {
		return 0
	}
	return max(time.Until(in.commitLast.Add(in.cfg.CommitInterval)), 0)
}

// commitPending reports whether a commit is held back by CommitInterval
// with offsets to carry, so that the poll loop must not sleep past it.
func (in *Ingestor) commitPending() bool {
	return in.commitRun == nil && in.commitWait() > 0 && in.tracker.AnyCommittable()
}

// awaitCommit waits until deadline (when past: not at all) for the running
// Commit and takes its result; it reports whether the Commit finished.
func (in *Ingestor) awaitCommit(ctx context.Context, deadline time.Time) bool {
	c := in.commitRun
	var err error
	if d := time.Until(deadline); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case err = <-c.done:
		case <-t.C:
			return false
		}
	} else {
		select {
		case err = <-c.done:
		default:
			return false
		}
	}
	in.commitRun = nil
	if err != nil {
		// Not fatal: the offsets stay committable and a later commit
		// carries them; a crash meanwhile only means redelivery. Logged
		// once per change of state, not on every attempt.
		if !in.commitFailing {
			in.commitFailing = true
			in.logger.WarnContext(ctx, "offset commit failed; retrying with backoff", "err", err)
		}
		in.commitNext = time.Now().Add(in.commitBo.Next())
		return true
	}
	for p, off := range c.offsets {
		if e, ok := in.ownedEpoch(p); ok && e == c.epochs[p] {
			in.tracker.Committed(p, off)
		}
	}
	if in.commitFailing {
		in.commitFailing = false
		in.commitBo.Reset()
		in.logger.InfoContext(ctx, "offset commits succeed again")
	}
	return true
}
