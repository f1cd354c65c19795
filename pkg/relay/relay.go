package relay

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pcp/route-processing/pkg/backoff"
)

// Relay moves outbox rows to Kafka. Build it with New, run it with Run,
// call Notified on every outbox notification and Connected after each
// (re)connect of the listener.
type Relay struct {
	logger *slog.Logger
	outbox Outbox
	// indexes is the outbox as an IndexStore, nil when it is not one
	// (reindex.go).
	indexes IndexStore
	// orphans is the outbox as an OrphanReleaser, nil when it is not one.
	orphans OrphanReleaser
	// notifier is the outbox as a Notifier, nil when it is not one
	// (wakeup.go).
	notifier Notifier
	// watermark is the claim watermark that outbox claims from, nil when
	// it is off (watermark.go).
	watermark *watermarked
	// watermarkSlow: a full rescan ran out of its bound and was logged;
	// the next that succeeds logs the recovery.
	watermarkSlow atomic.Bool
	pub           Publisher
	cfg           Config
	m             *metrics
	tracer        trace.Tracer // a no-op one when Config.Tracer is nil

	wakeMu   sync.Mutex
	wakes    []*wakeSlot // one per worker
	nextWake int         // where wakeOne starts looking

	paused atomic.Bool
	// kafkaErr is the cluster's state for readiness (nil: a broker
	// answers), and kafkaLack what the producer lacks while one does;
	// shown unless paused (setKafkaReady, setKafkaLack).
	kafkaMu        sync.Mutex
	kafkaErr       error
	kafkaLack      string // what the producer has lacked while a broker answers (setKafkaLack)
	kafkaDown      atomic.Bool
	probing        sync.Mutex    // one outage confirmation at a time
	outage         chan struct{} // a confirmed outage, for the prober (outage.go)
	dbOutageLogged atomic.Bool   // a failed claim was logged; the next good one logs the recovery
	claimsHealthy  atomic.Bool   // no database failure since the last good claim, which reported "postgres" ready
	// dbByControl: the "postgres" state shown is the pause-flag read's or
	// the initial one, which that read may replace (showDBWhileNoClaims);
	// any other report (setDBReady) takes the state over.
	dbByControl atomic.Bool
	// claimsTimedOut counts the claims in a row that ran out their bound
	// while the database answered probes (claimCall).
	claimsTimedOut atomic.Int32
	// lastDelivery is when a batch last had a row delivered (unix nanos).
	lastDelivery atomic.Int64
	// indexSeries are the indexes whose gauges were last exported; only
	// the gauges' refresh touches it (refreshIndexGauges).
	indexSeries map[string]bool
	// undated dates the horizon's holders whose start the relay's role
	// may not read (horizon.go).
	undated undatedHolders
	// patience is how long a probe of the cluster waits for its answer,
	// dbPatience the same for the database (watchCall).
	patience, dbPatience *backoff.Patience

	rngMu sync.Mutex
	rng   *rand.Rand

	// Wake-up mode (wakeup.go).
	lastNotify atomic.Int64 // unix nanos of the last NOTIFY
	connected  atomic.Int64 // unix nanos of the listener's last (re)connect
	modeMu     sync.Mutex
	mode       string
	relisten   chan struct{} // Relisten
}

// New builds a relay. It does not touch the database or the brokers. Its
// wake-up mode starts as "notify"; call [Relay.Notified] for each NOTIFY
// and [Relay.Connected] after each (re)connect of the listener.
//
// Some of its work depends on what outbox and pub implement beyond
// [Outbox] and [Publisher] (*store.Outbox and *kafkax.Producer implement
// all of it; the unit tests' fakes little): the claim watermark
// (boundedOutbox, watermark.go), the reindexer ([IndexStore]), the
// release of cut claims' leases on a stop ([OrphanReleaser]), the probe of
// the listener ([Notifier]), the producer's link problems in readiness
// (linkReporter, outage.go) and the partitions' state in a postponed row's
// error (partitionDescriber, publish.go). Without one, that work is not
// done.
func New(logger *slog.Logger, outbox Outbox, pub Publisher, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	r := &Relay{
		logger:     logger.With("component", "relay"),
		pub:        pub,
		cfg:        cfg,
		m:          newMetrics(cfg.Registerer),
		outage:     make(chan struct{}, 1),
		relisten:   make(chan struct{}, 1),
		rng:        rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		patience:   backoff.NewPatience(cfg.probeTimeout(), cfg.probeWaitMax()),
		dbPatience: backoff.NewPatience(min(cfg.DBTimeout, dbProbeWait), dbProbeWaitMax),
	}
	r.outbox, r.watermark = withWatermark(outbox, cfg)
	r.indexes, _ = outbox.(IndexStore)
	r.orphans, _ = outbox.(OrphanReleaser)
	r.notifier, _ = outbox.(Notifier)
	if r.cfg.Tracer == nil {
		r.tracer = noop.NewTracerProvider().Tracer("")
	} else {
		r.tracer = r.cfg.Tracer
	}
	r.setMode(context.Background(), modeNotify)
	return r, nil
}

// Run runs the workers, the prober and the housekeeping loops until ctx
// ends, then finishes (or gives back) the batches in flight and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	// Not ready until proven: no claims until a broker has answered (rows
	// claimed while Kafka is unreachable would only be given back), and
	// "postgres" turns ready with the first successful claim, or, while
	// Kafka is down, the first pause-flag read (showDBWhileNoClaims).
	r.setReady(ComponentPostgres, "not connected yet")
	r.dbByControl.Store(true)
	r.kafkaDown.Store(true)
	r.setKafkaReady(errors.New("not probed yet"))
	var wg sync.WaitGroup
	wg.Go(func() { r.watchKafka(ctx) })
	r.wakeMu.Lock()
	for i := 0; i < r.cfg.Workers; i++ {
		slot := &wakeSlot{ch: make(chan struct{}, 1)}
		r.wakes = append(r.wakes, slot)
		wg.Go(func() { r.worker(ctx, i, slot) })
	}
	r.wakeMu.Unlock()
	wg.Go(func() { r.watchControl(ctx) })
	wg.Go(func() { r.watchListener(ctx) })
	wg.Go(func() { r.refreshGauges(ctx) })
	if r.cfg.Retention > 0 {
		wg.Go(func() { r.retention(ctx) })
	}
	if r.indexes != nil && r.cfg.ReindexInterval > 0 {
		wg.Go(func() { r.reindex(ctx) })
	}
	wg.Wait()
	if r.orphans != nil {
		// The claims cut by the stop: no later claim will give them back.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), orphanReleaseBound)
		defer cancel()
		r.orphans.ReleaseOrphans(c)
	}
	return nil
}

// OrphanReleaser gives back, on a stop, the leases of claims that failed
// (the stop cut them) but may have run on the server; *store.Outbox
// implements it.
type OrphanReleaser interface {
	ReleaseOrphans(ctx context.Context)
}

// orphanReleaseBound bounds ReleaseOrphans on a stop: its waits are a
// second and its give-backs 60–370 ms each when they follow a cut claim
// (measured; the stop took 1.2–1.9 s longer), within what the stop leaves.
const orphanReleaseBound = 3 * time.Second
