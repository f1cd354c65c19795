package ingest

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcp/route-processing/pkg/dlq"
	"github.com/pcp/route-processing/pkg/obs"
)

// Metrics are the ingestor's Prometheus metrics.
type Metrics struct {
	success       prometheus.Counter
	failure       *prometheus.CounterVec
	batchSize     prometheus.Histogram
	batchDuration prometheus.Histogram
	lag           *prometheus.GaugeVec

	// The ingestor's stages of a passport's path (obs.StageMetric), each
	// the time since the previous point: fetched (input record timestamp →
	// returned by Poll), parsed (→ parsed and validated), committed (→ its
	// transaction committed, fsync included). Curried once, so that an
	// observation per record allocates nothing.
	stageFetched, stageParsed, stageCommitted prometheus.Observer
}

// NewMetrics registers the ingestor's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		success: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_ingest_success_total",
			Help: "Input records written to the database (passport upserted; its outbox rows written when the route is new).",
		}),
		failure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "route_passport_ingest_failure_total",
			Help: "Input records written to the dead-letter topic, by pcp-error-category.",
		}, []string{"category"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "route_passport_ingest_batch_size",
			Help:    "Records per batch.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "route_passport_ingest_batch_duration_seconds",
			Help:    "Time from a batch's dispatch until all its records were written or dead-lettered.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "route_passport_ingest_consumer_lag",
			Help: "Records between the committed offset and the high watermark, per assigned partition.",
		}, []string{"partition"}),
	}
	for _, c := range dlq.Categories() {
		m.failure.WithLabelValues(string(c))
	}
	reg.MustRegister(m.success, m.failure, m.batchSize, m.batchDuration, m.lag)
	stages := obs.NewStageHistogram(reg)
	m.stageFetched = stages.WithLabelValues("fetched")
	m.stageParsed = stages.WithLabelValues("parsed")
	m.stageCommitted = stages.WithLabelValues("committed")
	return m
}

func (m *Metrics) setLag(p int32, lag int64) {
	m.lag.WithLabelValues(strconv.Itoa(int(p))).Set(float64(lag))
}

func (m *Metrics) dropLag(p int32) {
	m.lag.DeleteLabelValues(strconv.Itoa(int(p)))
}
