package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcp/route-processing/pkg/obs"
)

// metrics are the relay's Prometheus series (contract §5 names).
type metrics struct {
	published     prometheus.Counter
	retried       prometheus.Counter
	failed        prometheus.Counter
	released      prometheus.Counter
	postponed     prometheus.Counter
	pending       prometheus.Gauge
	failedRows    prometheus.Gauge
	oldestAge     prometheus.Gauge
	pendingAt     prometheus.Gauge
	paused        prometheus.Gauge
	publishTime   prometheus.Histogram
	ingestToPub   prometheus.Histogram
	claimedRows   prometheus.Histogram
	kafkaOutages  prometheus.Counter
	lostLeaseRows prometheus.Counter
	oldestXactAge prometheus.Gauge
	liveTuples    prometheus.Gauge
	deadTuples    prometheus.Gauge
	tableBytes    prometheus.Gauge
	healthAt      prometheus.Gauge
	wakeupMode    *prometheus.GaugeVec
	indexBytes    *prometheus.GaugeVec
	indexRebuilds *prometheus.CounterVec
	stage         *prometheus.HistogramVec
}

// Stages of a passport's path the relay observes in obs.StageMetric.
const (
	stageNotifyToClaimed    = "notify_to_claimed"         // NOTIFY received → its claim returned
	stageCreatedToClaimed   = "created_to_claimed"        // row created_at → claimed (per row)
	stageClaimedToReported  = "claimed_to_reported"       // claim returned → the batch's last delivery report (per row)
	stageBatchReported      = "claimed_to_batch_reported" // the same, once per batch
	stageCreatedToPublished = "created_to_published"      // row created_at → delivery report (per row)
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_published_total",
			Help: "Outbox rows published to Kafka and marked PUBLISHED.",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_retry_total",
			Help: "Failed publishes rescheduled with backoff (an attempt counted).",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_failed_total",
			Help: "Outbox rows that reached OUTBOX_MAX_ATTEMPTS and became FAILED.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_released_total",
			Help: "Leases given back without counting an attempt (Kafka unreachable, producer reset, shutdown).",
		}),
		postponed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_postponed_total",
			Help: "Rows rescheduled with backoff without counting an attempt: the cluster answers but could not take them (no leader, not enough replicas, timeouts).",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_pending",
			Help: "PENDING outbox rows (refreshed every few seconds).",
		}),
		failedRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_failed_rows",
			Help: "FAILED outbox rows: their events reach Kafka only after `outbox-relay requeue` (refreshed with the pending gauges).",
		}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_oldest_pending_age_seconds",
			Help: "Age of the oldest PENDING outbox row, 0 when none (refreshed every few seconds).",
		}),
		pendingAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_pending_refreshed_timestamp_seconds",
			Help: "Unix time of the last successful refresh of the pending and failed-rows gauges; a refresh that fails (a busy database: after a held snapshot the count walks every dead index entry) leaves them at their previous values.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_paused",
			Help: "1 while an operator has paused the relays (outbox-relay pause).",
		}),
		publishTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "route_passport_outbox_publish_duration_seconds",
			Help:    "Time from sending a batch to the last delivery report.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		ingestToPub: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "route_passport_outbox_ingest_to_publish_seconds",
			Help:    "Time from the outbox row's created_at to its delivery report.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}),
		claimedRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "route_passport_outbox_claim_rows",
			Help:    "Rows per non-empty claim.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		kafkaOutages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_kafka_outages_total",
			Help: "Kafka outages detected (no broker answered a probe).",
		}),
		lostLeaseRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "route_passport_outbox_lost_lease_total",
			Help: "Rows whose mark changed nothing because their lease had been taken over.",
		}),
		oldestXactAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_db_oldest_xact_age_seconds",
			Help: "Age of the oldest transaction, snapshot or prepared transaction on the database holding back the xmin horizon (vacuum), 0 when none (refreshed with the pending gauges).",
		}),
		liveTuples: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_live_tuples",
			Help: "Live tuples of route_passport_outbox (pg_stat_user_tables estimate; after a statistics reset, e.g. a failover, the planner's until the next vacuum or analyze).",
		}),
		deadTuples: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_dead_tuples",
			Help: "Dead tuples of route_passport_outbox not yet vacuumed (pg_stat_user_tables estimate; counted from the last statistics reset, e.g. a failover).",
		}),
		tableBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_table_bytes",
			Help: "Size of route_passport_outbox with its indexes and TOAST (pg_total_relation_size).",
		}),
		healthAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "route_passport_outbox_table_health_refreshed_timestamp_seconds",
			Help: "Unix time of the last successful refresh of the oldest-transaction age, tuple and table-size gauges; a refresh that fails leaves them at their previous values.",
		}),
		wakeupMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "route_passport_outbox_relay_wakeup_mode",
			Help: "1 for the way the relay learns of new rows: notify (LISTEN/NOTIFY arrives) or poll (notifications do not arrive, e.g. behind a transaction pooler without DATABASE_LISTEN_URL; rows wait up to OUTBOX_POLL_INTERVAL).",
		}, []string{"mode"}),
		indexBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "route_passport_outbox_index_bytes",
			Help: "Size of each index of route_passport_outbox (pg_relation_size; refreshed with the pending gauges).",
		}, []string{"index"}),
		indexRebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "route_passport_outbox_index_rebuilds_total",
			Help: "Bloated outbox indexes this relay rebuilt (REINDEX INDEX CONCURRENTLY).",
		}, []string{"index"}),
	}
	stageReg := reg
	if stageReg == nil {
		stageReg = prometheus.NewRegistry() // registered nowhere that is scraped
	}
	m.stage = obs.NewStageHistogram(stageReg)
	if reg != nil {
		reg.MustRegister(m.published, m.retried, m.failed, m.released, m.postponed, m.pending, m.failedRows, m.oldestAge, m.pendingAt,
			m.paused, m.publishTime, m.ingestToPub, m.claimedRows, m.kafkaOutages, m.lostLeaseRows,
			m.oldestXactAge, m.liveTuples, m.deadTuples, m.tableBytes, m.healthAt, m.wakeupMode,
			m.indexBytes, m.indexRebuilds)
	}
	return m
}
