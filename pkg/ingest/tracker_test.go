package ingest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTracker(t *testing.T) {
	t.Parallel()

	t.Run("LaterFinishingFirstDoesNotMoveTheCommit", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		for _, o := range []int64{10, 11, 12} {
			_, ok := tr.Add(0, o)
			require.True(t, ok)
		}
		tr.Done(0, 12, 0)
		_, ok := tr.Committable(0)
		require.False(t, ok, "offset 10 is still in flight")
		tr.Done(0, 10, 0)
		off, ok := tr.Committable(0)
		require.True(t, ok)
		require.Equal(t, int64(11), off)
		tr.Committed(0, off)
		_, ok = tr.Committable(0)
		require.False(t, ok, "nothing new since the commit")
		tr.Done(0, 11, 0)
		off, ok = tr.Committable(0)
		require.True(t, ok)
		require.Equal(t, int64(13), off)
		require.Equal(t, 0, outstanding(tr, 0))
	})

	t.Run("AnyCommittable", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		require.False(t, tr.AnyCommittable(), "nothing tracked")
		tr.Add(0, 5)
		tr.Add(1, 7)
		require.False(t, tr.AnyCommittable(), "both in flight")
		tr.Done(1, 7, 0)
		require.True(t, tr.AnyCommittable(), "partition 1 moved")
		off, _ := tr.Committable(1)
		tr.Committed(1, off)
		require.False(t, tr.AnyCommittable(), "committed; partition 0 still in flight")
	})

	t.Run("LagBase", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		require.Equal(t, int64(-1), tr.LagBase(0), "nothing polled")
		tr.Add(0, 40)
		tr.Add(0, 41)
		require.Equal(t, int64(40), tr.LagBase(0), "before the first commit: where polling started")
		tr.Done(0, 40, 0)
		off, _ := tr.Committable(0)
		tr.Committed(0, off)
		require.Equal(t, int64(41), tr.LagBase(0), "the commit")
		tr.Drop(0)
		tr.Add(0, 45)
		require.Equal(t, int64(45), tr.LagBase(0), "a new assignment starts afresh")
	})

	t.Run("Gaps", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		for _, o := range []int64{3, 7, 8} { // 4..6 compacted away or markers
			tr.Add(1, o)
		}
		tr.Done(1, 7, 0)
		tr.Done(1, 3, 0)
		off, ok := tr.Committable(1)
		require.True(t, ok)
		require.Equal(t, int64(8), off)
		require.Equal(t, 1, outstanding(tr, 1))
	})

	t.Run("PartitionsAreIndependent", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		tr.Add(0, 0)
		tr.Add(1, 0)
		tr.Done(1, 0, 0)
		_, ok := tr.Committable(0)
		require.False(t, ok)
		off, ok := tr.Committable(1)
		require.True(t, ok)
		require.Equal(t, int64(1), off)
		require.Equal(t, []int32{0, 1}, tr.Partitions())
	})

	t.Run("RedeliveryAndUnknownAreIgnored", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		_, ok := tr.Add(0, 5)
		require.True(t, ok)
		_, ok = tr.Add(0, 5)
		require.False(t, ok, "not past the last added: the caller truncates first")
		_, ok = tr.Add(0, 4)
		require.False(t, ok)
		tr.Done(0, 4, 0) // never added
		tr.Done(9, 1, 0) // unknown partition
		_, ok = tr.Committable(0)
		require.False(t, ok)
	})

	t.Run("DropForgets", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		tr.Add(0, 1)
		tr.Drop(0)
		tr.Done(0, 1, 0)
		_, ok := tr.Committable(0)
		require.False(t, ok)
		_, ok = tr.Add(0, 0)
		require.True(t, ok, "a new assignment may start lower")
	})

	t.Run("TruncateKeepsWhatLiesBelow", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		for o := int64(10); o < 30; o++ {
			tr.Add(0, o)
		}
		for o := int64(10); o < 15; o++ {
			tr.Done(0, o, 0)
		}
		off, _ := tr.Committable(0)
		tr.Committed(0, off) // 15
		tr.Truncate(0, 20)   // 20..29 are other records now
		gen, ok := tr.Add(0, 20)
		require.True(t, ok)
		require.NotEqual(t, uint64(0), gen)
		tr.Done(0, 20, 0) // the old record at 20 finishing does not count
		for o := int64(15); o < 20; o++ {
			tr.Done(0, o, 0) // below the truncation: still the log's
		}
		off, ok = tr.Committable(0)
		require.True(t, ok)
		require.Equal(t, int64(20), off, "up to the new record at 20, unfinished")
		tr.Done(0, 20, gen)
		off, _ = tr.Committable(0)
		require.Equal(t, int64(21), off)
	})

	t.Run("TruncateBelowTheCommitCommitsItsPoint", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		for o := int64(0); o < 22; o++ {
			tr.Add(0, o)
			tr.Done(0, o, 0)
		}
		tr.Add(0, 22) // in flight
		off, _ := tr.Committable(0)
		require.Equal(t, int64(22), off)
		tr.Truncate(0, 0) // the topic recreated while the commit of 22 was in flight
		tr.Committed(0, 22)
		off, ok := tr.Committable(0)
		require.True(t, ok, "the old commit's report does not stand for the new log")
		require.Equal(t, int64(0), off, "the group's offset goes back to the new log's start at once")
		tr.Committed(0, 0)
		tr.Done(0, 22, 0) // the old record in flight
		_, ok = tr.Committable(0)
		require.False(t, ok)
		require.Equal(t, int64(0), tr.LagBase(0))
	})

	t.Run("CompactsUnderLoad", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		for o := int64(0); o < 10_000; o++ {
			tr.Add(0, o)
			tr.Done(0, o, 0)
		}
		off, _ := tr.Committable(0)
		require.Equal(t, int64(10_000), off)
		require.Less(t, len(tr.parts[0].entries), 2100)
	})
}

// outstanding returns how many added offsets of p are not finished.
func outstanding(tr *tracker, p int32) int {
	pt := tr.parts[p]
	if pt == nil {
		return 0
	}
	n := 0
	for _, e := range pt.entries[pt.head:] {
		if !e.done {
			n++
		}
	}
	return n
}
