package ingest

import (
	"slices"
	"time"
)

// updateLag refreshes the lag gauges of the assigned partitions, at most
// once a second. A partition nothing was polled from in this assignment
// (one assigned during an outage is paused at once, an idle one has
// nothing to poll) counts from the group's committed offset, asked of the
// coordinator once per assignment (again after askGroupEvery if it did not
// answer), on this goroutine but briefly.
//
// The paused partitions' high watermarks are asked of the brokers for at
// most lagAskBudget per pass (the request under way may take twice that),
// whatever the number of partitions: with the brokers hanging each request
// runs out its wait (500 ms, 1 s measured), and one per paused partition
// held the poll loop, and a SIGTERM, for a second per partition. A partition whose turn did not come keeps its last figure; an
// ask, answered or not, waits askWatermarkEvery before the next, so the
// others get theirs in the next passes.
func (in *Ingestor) updateLag() {
	if time.Since(in.lagAt) < time.Second {
		return
	}
	in.lagAt = time.Now()
	askUntil := in.lagAt.Add(lagAskBudget)
	var ask []int32
	for _, p := range in.ownedPartitions() {
		high, ok := in.consumer.HighWatermark(p, askUntil)
		if !ok {
			continue
		}
		base := in.tracker.LagBase(p)
		if base < 0 {
			o, known := in.groupOffsets[p]
			if !known {
				ask = append(ask, p)
			}
			if o < 0 || !known {
				continue // nothing committed: no base until a record is polled
			}
			base = o
		}
		in.metrics.setLag(p, max(high-base, 0))
	}
	if len(ask) == 0 || time.Since(in.groupAskedAt) < askGroupEvery {
		return
	}
	in.groupAskedAt = time.Now()
	offsets, err := in.consumer.Committed(ask, askGroupTimeout)
	if err != nil {
		return // asked again later
	}
	for _, p := range ask {
		o, ok := offsets[p]
		if !ok {
			o = -1 // asked once per assignment, not again
		}
		in.groupOffsets[p] = o
	}
}

const (
	askGroupEvery   = 5 * time.Second
	askGroupTimeout = 500 * time.Millisecond
	lagAskBudget    = 500 * time.Millisecond
)

// ownedPartitions returns the assigned partitions, in order.
func (in *Ingestor) ownedPartitions() []int32 {
	in.ownedMu.RLock()
	defer in.ownedMu.RUnlock()
	out := make([]int32, 0, len(in.owned))
	for p := range in.owned {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
