package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

// Row is a claimed outbox row.
type Row struct {
	ID        uuid.UUID
	RouteID   uuid.UUID
	EventType string
	Topic     string
	Key       string
	// Payload is the frozen event document (JSON), published unchanged.
	Payload []byte
	// Headers are the record headers stored with the row.
	Headers map[string]string
	// HeadersError says why the stored headers could not be decoded; the
	// row is then not published and the error counts as an attempt.
	HeadersError string
	Attempts     int
	CreatedAt    time.Time
	// Token is the lease token of the claim that returned the row.
	Token uuid.UUID
}

// Lease names a claimed row and its lease token.
type Lease struct {
	ID    uuid.UUID
	Token uuid.UUID
}

// Retry records one failed publish.
type Retry struct {
	ID    uuid.UUID
	Token uuid.UUID
	Error string
	Delay time.Duration
}

// RetryResult is the state a Retry left its row in.
type RetryResult struct {
	ID            uuid.UUID
	Status        string
	Attempts      int
	NextAttemptAt time.Time
}

// PendingSummary feeds the pending gauges.
type PendingSummary struct {
	Pending   int64
	OldestAge time.Duration
}

// Outbox is the relay's view of route_passport_outbox. Every method that
// takes leases changes only rows still held with that token and status
// PENDING.
type Outbox interface {
	// Claim leases up to limit due PENDING rows, oldest first, for lease,
	// skipping rows leased or locked by others, and stopping before the
	// payloads' stored sizes exceed maxBytes (the first row is always
	// taken). more reports that due rows were left out for the byte bound.
	// It returns nothing while the relays are paused. When it fails after
	// rows may have been leased, it gives those leases back itself.
	Claim(ctx context.Context, limit int, maxBytes int64, lease time.Duration) (rows []Row, more bool, err error)
	// MarkPublished marks rows PUBLISHED in one statement; it returns how
	// many rows changed.
	MarkPublished(ctx context.Context, leases []Lease) (int64, error)
	// Retry counts an attempt for each row: PENDING again after its delay,
	// or FAILED at maxAttempts. The lease is released.
	Retry(ctx context.Context, retries []Retry, maxAttempts int) ([]RetryResult, error)
	// Release gives leases back without counting an attempt.
	Release(ctx context.Context, leases []Lease) (int64, error)
	// Postpone gives leases back without counting an attempt, recording the
	// error in last_error and making each row due after its delay.
	Postpone(ctx context.Context, retries []Retry) (int64, error)
	// Paused reports whether an operator paused the relays.
	Paused(ctx context.Context) (bool, error)
	// Pending counts PENDING rows and the age of the oldest.
	Pending(ctx context.Context) (PendingSummary, error)
	// DeletePublished deletes up to limit rows PUBLISHED before now−olderThan.
	DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Message is one record to publish.
type Message struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Sentinels a Publisher wraps into its errors so the relay can tell the
// cluster's problems from the message's.
var (
	// ErrUnavailable: the cluster could not take the message for reasons of
	// its own: no broker reachable, a partition without a leader, not
	// enough in-sync replicas, timeouts. It never counts an attempt. The
	// relay probes the cluster: if no broker answers it gives the leases
	// back and waits for the cluster; if one does, it postpones the rows
	// with backoff (last_error recorded, attempts unchanged).
	ErrUnavailable = errors.New("kafka unavailable")
	// ErrNotAttempted: the message was not tried through no fault of its own
	// (the producer was being replaced after a fatal error, the relay is
	// shutting down). The lease is given back without counting an attempt.
	ErrNotAttempted = errors.New("publish not attempted")
)

// Publisher sends records to Kafka.
type Publisher interface {
	// PublishBatch sends every message, then waits for every delivery
	// report. The i-th error is nil once msgs[i] is acknowledged. When ctx
	// ends first, the unreported messages get an error wrapping
	// ErrNotAttempted (they may still be delivered: at least once).
	PublishBatch(ctx context.Context, msgs []Message) []error
	// Probe returns nil when a broker answers within timeout.
	Probe(ctx context.Context, timeout time.Duration) error
}

// Readiness receives the relay's component states ("kafka", "postgres"):
// reason "" means ready. *obs.Readiness implements it.
type Readiness interface {
	Set(component, reason string) bool
}

// Config configures a Relay. Zero values take the defaults of contract §5.
type Config struct {
	// MaxAttempts: a row that failed this many publishes becomes FAILED.
	// It is also written into each failed row's max_attempts.
	MaxAttempts int
	// InitialBackoff and MaxBackoff shape the retry delay ([Backoff]).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Jitter is the largest random extra fraction of a retry delay
	// (default 0.1; negative means none).
	Jitter float64
	// LockTimeout is the lease of a claimed row. It must exceed
	// PublishTimeout, and should by [LeaseMargin]: the publish may take
	// PublishTimeout plus the producer's report hand-off, and the marks must
	// land while the rows are still ours (a shorter lease risks duplicates,
	// never losses: marks check the lease token).
	LockTimeout time.Duration
	// BatchSize is the most rows per claim.
	BatchSize int
	// MaxClaimBytes bounds the payload bytes (as stored, pg_column_size)
	// of one claim, so that a run of large payloads cannot exhaust the
	// relay's memory: Workers × MaxClaimBytes (times the TOAST compression
	// ratio, times about two for the producer's copy) is held at most.
	// Default 16 MiB; a single larger row is still claimed, alone.
	MaxClaimBytes int64
	// PollInterval is the fallback poll when no notification arrives, and
	// the period of the pause-flag read that drives the paused gauge.
	PollInterval time.Duration
	// PublishTimeout bounds the wait for a batch's delivery reports.
	PublishTimeout time.Duration
	// Retention: PUBLISHED rows older than this are deleted; 0 disables it.
	Retention time.Duration
	// ProbeMaxBackoff caps the wait between broker probes in an outage, and
	// between retries while PostgreSQL is unreachable.
	ProbeMaxBackoff time.Duration
	// Workers is the number of claim/publish/mark loops (default 2).
	Workers int
	// StatsInterval is the refresh period of the pending gauges (default 5s).
	StatsInterval time.Duration
	// RetentionInterval is the period of the retention sweep (default 1m);
	// each statement deletes at most RetentionBatch rows (default 1000).
	RetentionInterval time.Duration
	RetentionBatch    int
	// ShutdownGrace bounds how long an in-flight publish may go on after
	// Run's context ends (default 20s); what is not delivered by then has
	// its lease given back.
	ShutdownGrace time.Duration

	// Registerer receives the relay's metrics (nil: none registered).
	Registerer prometheus.Registerer
	// Readiness receives the "kafka" and "postgres" states (nil: ignored).
	Readiness Readiness
}

func (c Config) withDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.InitialBackoff = cmp.Or(c.InitialBackoff, time.Second)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 60*time.Second)
	if c.Jitter == 0 {
		c.Jitter = 0.1
	}
	c.Jitter = max(c.Jitter, 0)
	c.LockTimeout = cmp.Or(c.LockTimeout, 60*time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.MaxClaimBytes = cmp.Or(c.MaxClaimBytes, DefaultMaxClaimBytes)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 30*time.Second)
	c.ProbeMaxBackoff = cmp.Or(c.ProbeMaxBackoff, 30*time.Second)
	c.Workers = cmp.Or(c.Workers, 2)
	c.StatsInterval = cmp.Or(c.StatsInterval, 5*time.Second)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, time.Minute)
	c.RetentionBatch = cmp.Or(c.RetentionBatch, 1000)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 20*time.Second)
	return c
}

// Validate reports a configuration the relay cannot keep its promises with.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxAttempts < 1:
		return errors.New("relay: MaxAttempts must be at least 1")
	case c.MaxBackoff < c.InitialBackoff:
		return errors.New("relay: MaxBackoff is less than InitialBackoff")
	case c.LockTimeout <= c.PublishTimeout:
		return fmt.Errorf("relay: LockTimeout (%s) must exceed PublishTimeout (%s), by %s or more", c.LockTimeout, c.PublishTimeout, LeaseMargin)
	case c.BatchSize < 1 || c.Workers < 1:
		return errors.New("relay: BatchSize and Workers must be at least 1")
	case c.MaxClaimBytes < 1:
		return errors.New("relay: MaxClaimBytes must be positive")
	}
	return nil
}

// DefaultMaxClaimBytes is the default of Config.MaxClaimBytes.
const DefaultMaxClaimBytes = 16 << 20

// Lease budget: a batch's publish may last PublishTimeout plus the
// producer's delivery-report margin (kafkax waits message.timeout.ms + 5s),
// and its marks need time to land before the lease ends.
const (
	reportMargin = 5 * time.Second
	markMargin   = 5 * time.Second
	// LeaseMargin is what a lease must leave beyond PublishTimeout.
	LeaseMargin = reportMargin + markMargin
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
	probing   sync.Mutex  // one outage confirmation at a time
	dbDown    atomic.Bool // an outage was logged
	dbUp      atomic.Bool // "postgres" is reported ready

	runCtx context.Context // Run's context, for the outage prober
	bg     sync.WaitGroup  // outage probers

	rngMu sync.Mutex
	rng   *rand.Rand
}

// New builds a relay. It does not touch the database or the brokers.
func New(logger *slog.Logger, outbox Outbox, pub Publisher, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Relay{
		logger: logger,
		outbox: outbox,
		pub:    pub,
		cfg:    cfg,
		m:      newMetrics(cfg.Registerer),
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

// Run runs the workers and the housekeeping loops until ctx ends, then
// finishes (or gives back) the batches in flight and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	// Not ready until proven: no claims until a broker has answered (rows
	// claimed while Kafka is unreachable would only be given back), and
	// "postgres" turns ready with the first successful claim.
	r.runCtx = ctx
	r.setReady("postgres", errors.New("not connected yet"))
	r.kafkaDown.Store(true)
	r.setReady("kafka", errors.New("not probed yet"))
	var wg sync.WaitGroup
	wg.Go(func() { r.probe(ctx, false) })
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
	r.bg.Wait()
	return nil
}

// sleep waits for a wake, d, or the end of ctx.
func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

func (r *Relay) worker(ctx context.Context, id int, wake chan struct{}) {
	log := r.logger.With("worker", id)
	dbWait := time.Duration(0)
	for ctx.Err() == nil {
		if r.kafkaDown.Load() {
			// The prober wakes us when a broker answers again.
			sleep(ctx, wake, r.cfg.PollInterval)
			continue
		}
		rows, more, err := r.outbox.Claim(ctx, r.cfg.BatchSize, r.cfg.MaxClaimBytes, r.cfg.LockTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			dbWait = min(max(2*dbWait, 100*time.Millisecond), r.cfg.ProbeMaxBackoff)
			if !r.dbDown.Swap(true) {
				log.ErrorContext(ctx, "relay: cannot claim outbox rows; retrying", "err", err, "retry_in", dbWait)
			}
			r.dbUp.Store(false)
			r.setReady("postgres", err)
			sleep(ctx, nil, dbWait)
			continue
		}
		dbWait = 0
		if !r.dbUp.Load() {
			r.dbUp.Store(true)
			if r.dbDown.Swap(false) {
				log.InfoContext(ctx, "relay: database reachable again")
			}
			r.setReady("postgres", nil)
		}
		if len(rows) == 0 {
			sleep(ctx, wake, r.cfg.PollInterval)
			continue
		}
		r.m.claimedRows.Observe(float64(len(rows)))
		r.process(ctx, rows)
		if len(rows) < r.cfg.BatchSize && !more {
			sleep(ctx, wake, r.cfg.PollInterval)
		}
	}
}

// shutdownContext returns a context that outlives ctx by grace: work in
// flight when the relay is stopped gets that long to finish.
func shutdownContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(c, func() { t.Stop() })
	})
	return c, func() { stop(); cancel() }
}

// isolateMax bounds the rows of a batch re-sent one by one after message
// errors; past it the failures are too many to be one bad neighbour.
const isolateMax = 20

// outcome of one row's publish.
type outcome int

const (
	delivered outcome = iota
	countAttempt
	giveBack
	unavailable
)

func classify(err error, ctxDone bool) outcome {
	switch {
	case err == nil:
		return delivered
	case errors.Is(err, ErrNotAttempted), errors.Is(err, context.Canceled),
		ctxDone && errors.Is(err, context.DeadlineExceeded):
		return giveBack
	case errors.Is(err, ErrUnavailable):
		return unavailable
	}
	return countAttempt
}

func (r *Relay) process(ctx context.Context, rows []Row) {
	start := time.Now()
	errs := make([]error, len(rows))
	msgs := make([]Message, len(rows))
	// A row whose stored headers do not decode is its own fault: it is not
	// sent, and the error counts as an attempt; its neighbours go on.
	var failed []int
	send := make([]int, 0, len(rows))
	for i := range rows {
		if rows[i].HeadersError != "" {
			errs[i] = errors.New(rows[i].HeadersError)
			failed = append(failed, i)
			continue
		}
		msgs[i] = toMessage(&rows[i])
		send = append(send, i)
	}

	pubCtx, cancel := shutdownContext(ctx, r.cfg.ShutdownGrace)
	defer cancel()
	if len(send) == len(rows) {
		copy(errs, r.pub.PublishBatch(pubCtx, msgs))
	} else if len(send) > 0 {
		batch := make([]Message, len(send))
		for j, i := range send {
			batch[j] = msgs[i]
		}
		for j, err := range r.pub.PublishBatch(pubCtx, batch) {
			errs[send[j]] = err
		}
	}
	r.m.publishTime.Observe(time.Since(start).Seconds())

	var ok, back []Lease
	var rejected, unavail []int
	sortOut := func(i int, err error) {
		switch classify(err, pubCtx.Err() != nil) {
		case delivered:
			ok = append(ok, Lease{rows[i].ID, rows[i].Token})
			r.m.ingestToPub.Observe(time.Since(rows[i].CreatedAt).Seconds())
		case giveBack:
			back = append(back, Lease{rows[i].ID, rows[i].Token})
		case unavailable:
			unavail = append(unavail, i)
		default:
			rejected = append(rejected, i)
		}
	}
	for _, i := range send {
		sortOut(i, errs[i])
	}
	if len(rejected) > 1 && len(rejected) <= isolateMax {
		// A broker refuses a whole produce batch for one bad record (e.g.
		// over max.message.bytes), failing its innocent neighbours with the
		// same error. Send each failed message alone once, so that only the
		// offender is charged an attempt.
		// A send may take PublishTimeout plus the report margin, and the
		// marks need theirs: no send starts after the last moment at which
		// it can still end, and be marked, within the lease.
		again := rejected
		rejected = nil
		stopAt := r.isolateDeadline(start)
		for _, i := range again {
			if ctx.Err() != nil || time.Now().After(stopAt) {
				rejected = append(rejected, i)
				continue
			}
			errs[i] = r.pub.PublishBatch(pubCtx, msgs[i:i+1])[0]
			sortOut(i, errs[i])
		}
	}
	failed = append(failed, rejected...)
	var postponed []int
	if len(unavail) > 0 {
		switch {
		case ctx.Err() != nil:
			// Stopping: give the rows back at once. A probe could take
			// its whole timeout (a metadata request ignores cancellation)
			// out of the shutdown budget, and decides nothing now.
			for _, i := range unavail {
				back = append(back, Lease{rows[i].ID, rows[i].Token})
			}
		case r.confirmOutage(pubCtx, errs[unavail[0]]) != nil:
			for _, i := range unavail {
				back = append(back, Lease{rows[i].ID, rows[i].Token})
			}
		default:
			// A broker answers, but the cluster could not take these
			// messages (a partition without a leader, not enough in-sync
			// replicas): still the cluster's fault, not the rows'. Retry
			// later with backoff, without counting an attempt.
			postponed = unavail
		}
	}

	// Marks must land even while the relay is stopping: a published row
	// left PENDING is published again after its lease expires.
	markCtx, markCancel := shutdownContext(ctx, markMargin)
	defer markCancel()
	deadline := start.Add(r.cfg.LockTimeout)
	if len(ok) > 0 {
		r.retryDB(markCtx, deadline, "mark published", func(c context.Context) error {
			n, err := r.outbox.MarkPublished(c, ok)
			if err == nil {
				r.m.published.Add(float64(n))
				if lost := int64(len(ok)) - n; lost > 0 {
					r.m.lostLeaseRows.Add(float64(lost))
					r.logger.WarnContext(ctx, "relay: leases taken over before the mark; rows will be published again by their new holder", "rows", lost)
				}
			}
			return err
		})
	}
	if len(failed) > 0 {
		r.recordFailures(markCtx, deadline, rows, errs, failed)
	}
	if len(postponed) > 0 {
		r.postpone(markCtx, deadline, rows, errs, postponed)
	}
	if len(back) > 0 {
		r.retryDB(markCtx, deadline, "release leases", func(c context.Context) error {
			n, err := r.outbox.Release(c, back)
			if err == nil {
				r.m.released.Add(float64(n))
			}
			return err
		})
	}
}

// isolateDeadline is the last moment a one-by-one re-send of a batch
// claimed at start may begin: it may last PublishTimeout plus the report
// margin, and its mark needs markMargin, all within the lease.
func (r *Relay) isolateDeadline(start time.Time) time.Time {
	return start.Add(r.cfg.LockTimeout - r.cfg.PublishTimeout - LeaseMargin)
}

// retryDelay is the backoff before a row's next try.
func (r *Relay) retryDelay(row *Row) time.Duration {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return Backoff(row.Attempts+1, r.cfg.InitialBackoff, r.cfg.MaxBackoff, r.cfg.Jitter, r.rng.Float64())
}

func (r *Relay) recordFailures(ctx context.Context, deadline time.Time, rows []Row, errs []error, idx []int) {
	retries := make([]Retry, len(idx))
	byID := make(map[uuid.UUID]int, len(idx))
	for j, i := range idx {
		row := &rows[i]
		byID[row.ID] = i
		retries[j] = Retry{
			ID:    row.ID,
			Token: row.Token,
			Error: truncate(errs[i].Error(), 1000),
			Delay: r.retryDelay(row),
		}
	}
	r.retryDB(ctx, deadline, "reschedule failed rows", func(c context.Context) error {
		res, err := r.outbox.Retry(c, retries, r.cfg.MaxAttempts)
		if err != nil {
			return err
		}
		for _, rr := range res {
			i := byID[rr.ID]
			row := &rows[i]
			attrs := []any{"outbox_id", rr.ID, "event_type", row.EventType, "topic", row.Topic,
				"key", row.Key, "attempts", rr.Attempts, "status", rr.Status}
			if rr.Status == "FAILED" {
				r.m.failed.Inc()
				r.logger.ErrorContext(ctx, "relay: outbox row failed for good; requeue it with `outbox-relay requeue`",
					append(attrs, "err", errs[i])...)
			} else {
				r.m.retried.Inc()
				r.logger.WarnContext(ctx, "relay: publish failed; will retry",
					append(attrs, "next_attempt_at", rr.NextAttemptAt, "err", errs[i])...)
			}
		}
		return nil
	})
}

// postpone reschedules rows the cluster could not take, with backoff and
// last_error, without counting an attempt.
func (r *Relay) postpone(ctx context.Context, deadline time.Time, rows []Row, errs []error, idx []int) {
	retries := make([]Retry, len(idx))
	topics := map[string]int{}
	for j, i := range idx {
		row := &rows[i]
		topics[row.Topic]++
		retries[j] = Retry{
			ID:    row.ID,
			Token: row.Token,
			Error: truncate(errs[i].Error(), 1000),
			Delay: r.retryDelay(row),
		}
	}
	r.retryDB(ctx, deadline, "postpone rows", func(c context.Context) error {
		n, err := r.outbox.Postpone(c, retries)
		if err == nil {
			r.m.postponed.Add(float64(n))
			r.logger.WarnContext(ctx, "relay: kafka answers but could not take these rows (no leader, not enough replicas?); retrying later without counting an attempt",
				"rows", n, "rows_by_topic", topics, "err", errs[idx[0]])
		}
		return err
	})
}

// retryDB runs fn until it succeeds, ctx ends or the lease deadline passes
// (after which the rows belong to whoever claims them next anyway).
func (r *Relay) retryDB(ctx context.Context, deadline time.Time, what string, fn func(context.Context) error) {
	wait := 100 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			r.logger.ErrorContext(ctx, "relay: giving up; the leases will expire and the rows be claimed again", "op", what, "err", err)
			return
		}
		r.dbUp.Store(false) // the next successful claim reports ready again
		r.setReady("postgres", err)
		r.logger.WarnContext(ctx, "relay: database write failed; retrying", "op", what, "err", err, "retry_in", wait)
		sleep(ctx, nil, wait)
		wait = min(2*wait, r.cfg.ProbeMaxBackoff)
	}
}

// confirmOutage probes the cluster after an ErrUnavailable. It returns nil
// when a broker answers; otherwise it enters outage mode (claims stop, a
// prober runs until a broker answers) and returns the probe's error.
func (r *Relay) confirmOutage(ctx context.Context, cause error) error {
	r.probing.Lock()
	defer r.probing.Unlock()
	if r.kafkaDown.Load() {
		return ErrUnavailable // another worker confirmed it already
	}
	err := r.pub.Probe(ctx, r.probeTimeout())
	if err == nil {
		return nil
	}
	r.kafkaDown.Store(true)
	r.m.kafkaOutages.Inc()
	r.setReady("kafka", fmt.Errorf("no broker answers: %w", err))
	r.logger.ErrorContext(ctx, "relay: kafka unreachable; claims stopped, leases given back, probing", "err", cause, "probe_err", err)
	r.bg.Go(func() { r.probe(r.runCtx, true) })
	return err
}

func (r *Relay) probeTimeout() time.Duration {
	return min(r.cfg.PublishTimeout, 5*time.Second)
}

// probe asks the cluster with capped exponential backoff until a broker
// answers, then lets the workers claim again. It stops with ctx.
func (r *Relay) probe(ctx context.Context, inOutage bool) {
	wait := min(250*time.Millisecond, r.cfg.ProbeMaxBackoff)
	if inOutage {
		sleep(ctx, nil, wait)
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := r.pub.Probe(ctx, r.probeTimeout())
		if err == nil {
			r.kafkaDown.Store(false)
			r.setReady("kafka", nil)
			if inOutage || attempt > 1 {
				r.logger.InfoContext(ctx, "relay: kafka reachable; claiming", "probes", attempt)
			}
			r.Wake()
			return
		}
		if attempt == 1 && !inOutage {
			r.setReady("kafka", fmt.Errorf("no broker answers: %w", err))
			r.logger.ErrorContext(ctx, "relay: kafka unreachable at start; probing", "err", err)
		} else {
			r.logger.DebugContext(ctx, "relay: kafka probe failed", "err", err, "attempt", attempt)
		}
		sleep(ctx, nil, wait)
		wait = min(2*wait, r.cfg.ProbeMaxBackoff)
	}
}

// watchControl reads the pause flag every poll interval for the paused gauge
// and the log; the claim itself honours the flag.
func (r *Relay) watchControl(ctx context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		paused, err := r.outbox.Paused(ctx)
		if err == nil && r.paused.Swap(paused) != paused {
			if paused {
				r.m.paused.Set(1)
				r.logger.WarnContext(ctx, "relay: paused by an operator; no new claims until `outbox-relay resume`")
			} else {
				r.m.paused.Set(0)
				r.logger.InfoContext(ctx, "relay: resumed")
				r.Wake()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshGauges keeps the pending gauges current with a cheap query on the
// PENDING partial index.
func (r *Relay) refreshGauges(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		if s, err := r.outbox.Pending(ctx); err == nil {
			r.m.pending.Set(float64(s.Pending))
			r.m.oldestAge.Set(s.OldestAge.Seconds())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retention deletes PUBLISHED rows older than Retention in small statements,
// so no statement holds many locks or writes a burst of WAL.
func (r *Relay) retention(ctx context.Context) {
	t := time.NewTicker(r.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		total := int64(0)
		for ctx.Err() == nil {
			n, err := r.outbox.DeletePublished(ctx, r.cfg.Retention, r.cfg.RetentionBatch)
			if err != nil {
				if ctx.Err() == nil {
					r.logger.WarnContext(ctx, "relay: retention sweep failed; next sweep will retry", "err", err)
				}
				break
			}
			total += n
			if n < int64(r.cfg.RetentionBatch) {
				break
			}
			sleep(ctx, nil, 50*time.Millisecond)
		}
		if total > 0 {
			r.logger.InfoContext(ctx, "relay: deleted published outbox rows past retention", "rows", total, "retention", r.cfg.Retention)
		}
	}
}

// headerOrder is the order of the contract's headers on the record; other
// stored headers follow sorted by name.
var headerOrder = []string{"type", "eventId", "traceId", "correlationId", "traceparent"}

func toMessage(row *Row) Message {
	m := Message{Topic: row.Topic, Key: []byte(row.Key), Value: row.Payload}
	if len(row.Headers) > 0 {
		m.Headers = make([]Header, 0, len(row.Headers))
		known := make(map[string]bool, len(headerOrder))
		for _, k := range headerOrder {
			known[k] = true
			if v, ok := row.Headers[k]; ok {
				m.Headers = append(m.Headers, Header{Key: k, Value: []byte(v)})
			}
		}
		var extra []string
		for k := range row.Headers {
			if !known[k] {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		for _, k := range extra {
			m.Headers = append(m.Headers, Header{Key: k, Value: []byte(row.Headers[k])})
		}
	}
	return m
}

// truncate bounds an error stored in last_error, keeping valid UTF-8
// (PostgreSQL rejects anything else in text).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}
