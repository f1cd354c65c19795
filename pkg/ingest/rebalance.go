package ingest

import (
	"context"
	"time"
)

// onAssigned runs inside Poll when partitions join the assignment.
func (in *Ingestor) onAssigned(parts []int32) {
	ctx := context.Background() // called by the client, which has none
	in.ownedMu.Lock()
	for _, p := range parts {
		in.epoch++
		in.owned[p] = in.epoch
		in.tracker.Drop(p)
		delete(in.paused, p)
		delete(in.groupOffsets, p)
	}
	in.ownedMu.Unlock()
	// librdkafka keeps an application pause on the partition across
	// unassign and assign (confluent-kafka-go #193): a partition revoked
	// while paused would come back paused for good. Pause it again while
	// consumption is held back (flowControl resumes it), resume it
	// otherwise (harmless when it was not paused).
	if in.mustPause() {
		in.pause(ctx, parts)
	} else if err := in.consumer.Resume(parts); err != nil {
		in.logger.WarnContext(ctx, "resume failed", "partitions", parts, "err", err)
		for _, p := range parts {
			in.paused[p] = true // flowControl tries again
		}
	}
	in.logger.InfoContext(ctx, "partitions assigned", "partitions", parts)
}

// onRevoked runs inside Poll before partitions leave the assignment: it
// waits (bounded, and at most until the shutdown's deadline once stop is
// closed) for their in-flight batches and commits what they finished,
// unless the membership was lost.
func (in *Ingestor) onRevoked(stop <-chan struct{}, parts []int32, lost bool) {
	ctx := context.Background() // called by the client, which has none
	revoked := make(map[int32]bool, len(parts))
	for _, p := range parts {
		revoked[p] = true
	}
	in.dropPending(func(it *item) bool { return revoked[it.rec().Partition] })
	if !lost && !in.finished {
		in.finishWhile(stop, time.Now().Add(in.cfg.RevokeTimeout), func() bool { return in.busy(parts) })
		in.commit(ctx, parts, in.cfg.CommitTimeout, true)
	}
	in.ownedMu.Lock()
	for _, p := range parts {
		delete(in.owned, p)
		delete(in.paused, p)
		delete(in.groupOffsets, p)
		in.tracker.Drop(p)
		in.metrics.dropLag(p)
	}
	in.ownedMu.Unlock()
	if lost {
		// The coordinator may hold the rejoin until the lost session
		// lapses once more (README, session.timeout.ms), so an operator
		// who sees no "partitions assigned" at once knows why.
		in.logger.InfoContext(ctx, "partitions lost with the group membership; rejoining, which the coordinator may hold for up to one session", "partitions", parts)
		return
	}
	in.logger.InfoContext(ctx, "partitions revoked", "partitions", parts)
}

// onRewound cuts partition p's tracking off at offset, which is not past
// the last offset polled from it in this assignment. The ingestor never seeks, so
// the client moved the position back itself: auto.offset.reset after the
// log under the position changed (the topic deleted and created again:
// back to its start), or a seek to where an unclean leader election
// truncated the log. The records from offset on are not the ones polled
// there before: the tracker forgets those (batches in flight finish them
// without counting) and their pending copies are dropped. Records below
// offset are still the log's and stay tracked.
func (in *Ingestor) onRewound(ctx context.Context, p int32, offset int64) {
	last := in.tracker.LastAdded(p)
	in.tracker.Truncate(p, offset)
	in.dropPending(func(it *item) bool { return it.rec().Partition == p && it.rec().Offset >= offset })
	in.logger.WarnContext(ctx, "the partition's offsets went back (topic recreated or log truncated); reading it again from there",
		"partition", p, "offset", offset, "last_polled", last)
}

// busy reports whether any of parts has records in in-flight batches.
func (in *Ingestor) busy(parts []int32) bool {
	for _, p := range parts {
		if in.dispatched[p] > 0 {
			return true
		}
	}
	return false
}

// dropPending forgets the unbatched records drop selects (all when nil).
// They were never committed, so they will be polled again.
func (in *Ingestor) dropPending(drop func(*item) bool) {
	kept := in.pending[:0]
	for _, it := range in.pending {
		if drop == nil || drop(it) {
			in.pendingBytes -= len(it.rec().Value)
			continue
		}
		kept = append(kept, it)
	}
	clear(in.pending[len(kept):])
	in.pending = kept
	in.parsedUpTo = 0 // parseNext skips the parsed ones
}

func (in *Ingestor) ownedEpoch(p int32) (uint64, bool) {
	in.ownedMu.RLock()
	defer in.ownedMu.RUnlock()
	e, ok := in.owned[p]
	return e, ok
}

// stillOwned reports whether it's record still belongs to the assignment it
// was polled in.
func (in *Ingestor) stillOwned(it *item) bool {
	e, ok := in.ownedEpoch(it.rec().Partition)
	return ok && e == it.epoch
}

// ownedItems filters out records whose partition was revoked since they were
// polled: a batch retrying through an outage stops working for a partition
// another member now owns.
func (in *Ingestor) ownedItems(items []*item) []*item {
	out := items[:0:0]
	for _, it := range items {
		if in.stillOwned(it) {
			out = append(out, it)
		}
	}
	return out
}
