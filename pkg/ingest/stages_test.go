package ingest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/testenv"
)

// The ingestor observes its three stages of a passport's path once per
// record: fetched for every record, parsed and committed for each valid
// one (a dead-lettered record leaves the passport's path after fetched).
func TestStageHistogramsPerRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, "")
	r := b.start(t)
	recs, _ := validRecords(t, 7)
	recs = append(recs, testenv.Record{Key: []byte("bad"), Value: []byte("{")})
	all := testenv.Produce(t, b.bootstrap, b.topic, recs...)
	b.waitCommitted(t, endOffsets(all), 60*time.Second)
	require.NoError(t, r.stop(t))

	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	var sums = map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != obs.StageMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
					sums[l.GetValue()] = m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	require.Equal(t, map[string]uint64{"fetched": 8, "parsed": 7, "committed": 7}, counts)
	for stage, sum := range sums {
		require.Greater(t, sum, 0.0, stage)
		require.Less(t, sum, 60.0, stage)
	}
}
