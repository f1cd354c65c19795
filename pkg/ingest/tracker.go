package ingest

import "sort"

// tracker knows, per partition, which polled offsets are finished (written
// to the database or acknowledged by the DLQ) and so how far the group's
// offset may be committed: up to, not past, the first unfinished record.
//
// Offsets of one partition are added in increasing order (the order Poll
// returns them; gaps from compaction or transaction markers are fine) and
// may finish in any order. It is used by the poll loop only: not safe for
// concurrent use.
type tracker struct {
	parts map[int32]*partTrack
}

type partTrack struct {
	// entries[head:] are the offsets added and not yet released, increasing.
	entries []trackEntry
	head    int
	// next is the offset to commit when no entry is outstanding: one past
	// the last released offset; -1 before anything was released.
	next int64
	// lastAdded guards the increasing order.
	lastAdded int64
	// gen counts the Truncates: an offset added after one is another
	// record than the one polled at that offset before it, and only the
	// record added under an entry's gen may finish that entry.
	gen uint64
	// committed is the last offset committed (the "next to read" form), -1
	// when none, or when a Truncate made the commits before it stale.
	committed int64
	// first is the lowest offset added in this assignment, or a Truncate's
	// offset below it; -1 before either.
	first int64
}

type trackEntry struct {
	offset int64
	gen    uint64
	done   bool
}

func newTracker() *tracker { return &tracker{parts: map[int32]*partTrack{}} }

func (t *tracker) part(p int32) *partTrack {
	pt := t.parts[p]
	if pt == nil {
		pt = &partTrack{next: -1, lastAdded: -1, committed: -1, first: -1}
		t.parts[p] = pt
	}
	return pt
}

// Add records that offset was polled on partition p and returns the gen
// that finishes it (Done). It reports false (and ignores the offset) when
// the offset is not greater than the last one added: the partition's
// position went back, which the caller must handle (Truncate) before adding
// it again.
func (t *tracker) Add(p int32, offset int64) (gen uint64, ok bool) {
	pt := t.part(p)
	if offset <= pt.lastAdded {
		return 0, false
	}
	pt.lastAdded = offset
	if pt.first < 0 {
		pt.first = offset
	}
	pt.entries = append(pt.entries, trackEntry{offset: offset, gen: pt.gen})
	return pt.gen, true
}

// Truncate forgets p's offsets from offset on: the log under them changed,
// and what is polled there next is other records. Offsets below it stay
// tracked (a truncated log keeps them; a recreated topic truncates at 0).
// When none of them is unfinished, offset itself becomes committable at
// once, even below the last commit: the group's offset must not stay past
// records of the new log that a next owner would then skip.
func (t *tracker) Truncate(p int32, offset int64) {
	pt := t.part(p)
	live := pt.entries[pt.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].offset >= offset })
	pt.entries = pt.entries[:pt.head+i]
	pt.lastAdded = offset - 1
	pt.gen++
	if i == 0 {
		pt.next = offset
	}
	pt.committed = -1
	if pt.first > offset {
		pt.first = offset
	}
}

// LastAdded returns the last offset added for p, -1 when none.
func (t *tracker) LastAdded(p int32) int64 {
	if pt := t.parts[p]; pt != nil {
		return pt.lastAdded
	}
	return -1
}

// Done marks offset on p, added under gen, finished. Unknown partitions or
// offsets are ignored: they belong to an assignment that was revoked
// meanwhile, or to a log that was truncated (the entry at that offset, if
// any, has another gen).
func (t *tracker) Done(p int32, offset int64, gen uint64) {
	pt := t.parts[p]
	if pt == nil {
		return
	}
	live := pt.entries[pt.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].offset >= offset })
	if i == len(live) || live[i].offset != offset || live[i].gen != gen {
		return
	}
	live[i].done = true
	for pt.head < len(pt.entries) && pt.entries[pt.head].done {
		pt.next = pt.entries[pt.head].offset + 1
		pt.head++
	}
	// Compact once the released prefix dominates, so memory stays bounded
	// by the records in flight.
	if pt.head > 1024 && pt.head*2 > len(pt.entries) {
		n := copy(pt.entries, pt.entries[pt.head:])
		pt.entries = pt.entries[:n]
		pt.head = 0
	}
}

// Committable returns the offset to commit for p (the offset of the next
// record to read, as Kafka wants it) when it moved past the last commit.
func (t *tracker) Committable(p int32) (int64, bool) {
	pt := t.parts[p]
	if pt == nil || pt.next < 0 || pt.next <= pt.committed {
		return 0, false
	}
	return pt.next, true
}

// AnyCommittable reports whether some partition has an offset to commit.
// The poll loop asks on every pass while a commit is held back, so it
// neither allocates nor sorts, as Partitions does.
func (t *tracker) AnyCommittable() bool {
	for p := range t.parts {
		if _, ok := t.Committable(p); ok {
			return true
		}
	}
	return false
}

// Committed records that offset was committed for p. A commit sent before
// a Truncate may report an offset past the new next: it is ignored, so the
// truncation point is committed after it.
func (t *tracker) Committed(p int32, offset int64) {
	if pt := t.parts[p]; pt != nil && offset > pt.committed && offset <= pt.next {
		pt.committed = offset
	}
}

// LagBase returns the offset p's lag counts from: the last offset
// committed in this assignment or, before the first commit (a database
// outage at start or across a rebalance commits nothing), the first offset
// polled in it, where the group's offset stood. -1 when neither is known.
func (t *tracker) LagBase(p int32) int64 {
	pt := t.parts[p]
	switch {
	case pt == nil:
		return -1
	case pt.committed >= 0:
		return pt.committed
	}
	return pt.first
}

// Drop forgets p (its assignment was revoked).
func (t *tracker) Drop(p int32) { delete(t.parts, p) }

// Partitions returns the tracked partitions.
func (t *tracker) Partitions() []int32 {
	out := make([]int32, 0, len(t.parts))
	for p := range t.parts {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
