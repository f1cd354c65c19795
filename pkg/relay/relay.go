package relay

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Relay moves outbox rows to Kafka. Build it with New, run it with Run, and
// call Wake on every outbox notification.
type Relay struct {
	logger *slog.Logger
	outbox Outbox
	pub    Publisher
	cfg    Config
	m      *metrics

	wakeMu sync.Mutex
	wakes  []chan struct{}

	paused    atomic.Bool
	kafkaDown atomic.Bool
	probing   sync.Mutex    // one outage confirmation at a time
	outage    chan struct{} // a confirmed outage, for the prober (outage.go)
	dbDown    atomic.Bool   // an outage was logged
	dbUp      atomic.Bool   // "postgres" is reported ready

	rngMu sync.Mutex
	rng   *rand.Rand
}

// New builds a relay. It does not touch the database or the brokers.
func New(logger *slog.Logger, outbox Outbox, pub Publisher, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &Relay{
		logger: logger.With("component", "relay"),
		outbox: withWatermark(outbox, cfg),
		pub:    pub,
		cfg:    cfg,
		m:      newMetrics(cfg.Registerer),
		outage: make(chan struct{}, 1),
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}, nil
}

// Wake tells every worker that rows may be due (a NOTIFY arrived). It never
// blocks; wakes that arrive while a worker is busy collapse into one.
func (r *Relay) Wake() {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	for _, ch := range r.wakes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (r *Relay) setReady(component string, err error) {
	if r.cfg.Readiness == nil {
		return
	}
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	r.cfg.Readiness.Set(component, reason)
}

// Run runs the workers, the prober and the housekeeping loops until ctx
// ends, then finishes (or gives back) the batches in flight and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	// Not ready until proven: no claims until a broker has answered (rows
	// claimed while Kafka is unreachable would only be given back), and
	// "postgres" turns ready with the first successful claim.
	r.setReady("postgres", errors.New("not connected yet"))
	r.kafkaDown.Store(true)
	r.setReady("kafka", errors.New("not probed yet"))
	var wg sync.WaitGroup
	wg.Go(func() { r.watchKafka(ctx) })
	r.wakeMu.Lock()
	for i := 0; i < r.cfg.Workers; i++ {
		ch := make(chan struct{}, 1)
		r.wakes = append(r.wakes, ch)
		wg.Go(func() { r.worker(ctx, i, ch) })
	}
	r.wakeMu.Unlock()
	wg.Go(func() { r.watchControl(ctx) })
	wg.Go(func() { r.refreshGauges(ctx) })
	if r.cfg.Retention > 0 {
		wg.Go(func() { r.retention(ctx) })
	}
	wg.Wait()
	return nil
}
