package obs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestStageBucketsSeparateWhatTheStagesTake: the histogram tells apart the
// durations the bench measures at both ends, a parse of 0.25 ms from one of
// 0.05 ms, and a backlog's 16 s from 10 s (both used to fall into one
// bucket each, the first and +Inf, so that their quantiles said nothing).
func TestStageBucketsSeparateWhatTheStagesTake(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewStageHistogram(reg)
	for _, tc := range []struct {
		stage     string
		durations []float64
	}{
		{"short", []float64{0.00005, 0.0003}},
		{"long", []float64{9, 16}},
	} {
		for _, d := range tc.durations {
			h.WithLabelValues(tc.stage).Observe(d)
		}
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	for _, m := range mfs[0].GetMetric() {
		stage := m.GetLabel()[0].GetValue()
		// Each observation lands in a finite bucket of its own: the count
		// steps from 0 to 1 to 2 below the last bound.
		var steps []uint64
		for _, b := range m.GetHistogram().GetBucket() {
			if n := b.GetCumulativeCount(); len(steps) == 0 || n != steps[len(steps)-1] {
				steps = append(steps, n)
			}
		}
		if steps[0] != 0 {
			steps = append([]uint64{0}, steps...)
		}
		require.Equal(t, []uint64{0, 1, 2}, steps, "stage %s: cumulative counts over the finite buckets", stage)
	}
}
