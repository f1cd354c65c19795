package ingest_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

	counts, sums := stageSamples(t, r.reg)
	require.Equal(t, map[string]uint64{"fetched": 8, "parsed": 7, "committed": 7}, counts)
	for stage, sum := range sums {
		require.Greater(t, sum, 0.0, stage)
		require.Less(t, sum, 60.0, stage)
	}
}

// stageSamples is the sample count and sum of each stage of the stage
// histogram in reg.
func stageSamples(t testing.TB, reg prometheus.Gatherer) (map[string]uint64, map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	counts, sums := map[string]uint64{}, map[string]float64{}
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
	return counts, sums
}
