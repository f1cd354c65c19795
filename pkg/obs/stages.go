package obs

import "github.com/prometheus/client_golang/prometheus"

// StageMetric is the histogram of one passport's path, stage by stage, that
// both binaries export (label stage), so that a latency regression names the
// stage it is in. Each binary observes the stages it sees; the bench reads
// them all from both /metrics.
const StageMetric = "route_passport_stage_seconds"

// NewStageHistogram registers the stage histogram on reg.
func NewStageHistogram(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: StageMetric,
		Help: "Time one passport spends in each stage of its path, from the input record's timestamp to the output's delivery report.",
		// The buckets span what one stage can take: from the tenths of a
		// millisecond of a parse (0.25-0.3 ms at the median in the bench) to
		// the minutes of the backlog after an outage (at 4,000/s on two
		// cores the fetch's p99 was 10 s, its worst 16 s). A quantile
		// past the last bucket reads as that bucket's bound.
		Buckets: []float64{
			0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03,
			0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300,
		},
	}, []string{"stage"})
	reg.MustRegister(h)
	return h
}
