package obs

import "github.com/prometheus/client_golang/prometheus"

// StageMetric is the one histogram of a passport's path through the
// service, stage by stage (issue 13's latency budget): each binary observes
// its own stages under the "stage" label, so that a regression names its
// stage. Stage names say from → to, e.g. "created_to_claimed".
const StageMetric = "route_passport_stage_seconds"

// StageBuckets are the buckets of [StageMetric]: 0.5ms to 10s, about three
// per decade below 100ms (where the path's stages live when idle) and
// coarser above (backlogs, outages).
func StageBuckets() []float64 {
	return []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
		0.1, 0.2, 0.5, 1, 2, 5, 10}
}

// NewStageHistogram registers [StageMetric] on reg (nil: not registered)
// and returns it; observe with .WithLabelValues(stage).
func NewStageHistogram(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    StageMetric,
		Help:    "Latency of one stage of a passport's path through the service (stage label: from_to_to).",
		Buckets: StageBuckets(),
	}, []string{"stage"})
	if reg != nil {
		reg.MustRegister(h)
	}
	return h
}
