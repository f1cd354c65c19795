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
			require.True(t, tr.Add(0, o))
		}
		tr.Done(0, 12)
		_, ok := tr.Committable(0)
		require.False(t, ok, "offset 10 is still in flight")
		tr.Done(0, 10)
		off, ok := tr.Committable(0)
		require.True(t, ok)
		require.Equal(t, int64(11), off)
		tr.Committed(0, off)
		_, ok = tr.Committable(0)
		require.False(t, ok, "nothing new since the commit")
		tr.Done(0, 11)
		off, ok = tr.Committable(0)
		require.True(t, ok)
		require.Equal(t, int64(13), off)
		require.Equal(t, 0, outstanding(tr, 0))
	})

	t.Run("LagBase", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		require.Equal(t, int64(-1), tr.LagBase(0), "nothing polled")
		tr.Add(0, 40)
		tr.Add(0, 41)
		require.Equal(t, int64(40), tr.LagBase(0), "before the first commit: where polling started")
		tr.Done(0, 40)
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
		tr.Done(1, 7)
		tr.Done(1, 3)
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
		tr.Done(1, 0)
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
		require.True(t, tr.Add(0, 5))
		require.False(t, tr.Add(0, 5))
		require.False(t, tr.Add(0, 4))
		tr.Done(0, 4) // never added
		tr.Done(9, 1) // unknown partition
		_, ok := tr.Committable(0)
		require.False(t, ok)
	})

	t.Run("DropForgets", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		tr.Add(0, 1)
		tr.Drop(0)
		tr.Done(0, 1)
		_, ok := tr.Committable(0)
		require.False(t, ok)
		require.True(t, tr.Add(0, 0), "a new assignment may start lower")
	})

	t.Run("CompactsUnderLoad", func(t *testing.T) {
		t.Parallel()
		tr := newTracker()
		for o := int64(0); o < 10_000; o++ {
			tr.Add(0, o)
			tr.Done(0, o)
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
