package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/store"
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one consumed input record.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil: no key
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// TimestampType is "CreateTime", "LogAppendTime" or "NoTimestampType".
	TimestampType string
}

// Consumer is the group consumer of the input topic. Every method but
// Commit is called from the goroutine running [Run] (the rebalance functions
// given to Subscribe run inside Poll, on that goroutine). Commit runs on a
// goroutine of its own, concurrently with the others, one call at a time, so
// that a coordinator that does not answer never stalls polling.
type Consumer interface {
	// Subscribe joins the group. assigned is called after partitions were
	// added to the assignment; revoked before they leave it (lost: the
	// membership was lost and committing is pointless).
	Subscribe(assigned func(partitions []int32), revoked func(partitions []int32, lost bool)) error
	// Poll returns the next record, or nil when none arrived within
	// timeout. An error is fatal.
	Poll(timeout time.Duration) (*Record, error)
	// Pause stops fetching the partitions; Resume restarts from the record
	// after the last one Poll returned.
	Pause(partitions []int32) error
	Resume(partitions []int32) error
	// Commit synchronously commits, per partition, the next offset to read.
	Commit(offsets map[int32]int64) error
	// HighWatermark returns the last known high watermark of a partition.
	HighWatermark(partition int32) (int64, bool)
}

// Store writes accepted passports. Errors are classified with
// store.Classify.
type Store interface {
	// Begin starts a write transaction on a connection of its own.
	Begin(ctx context.Context) (WriteTx, error)
	// Ping makes one round trip.
	Ping(ctx context.Context) error
}

// WriteTx is one write transaction (see store.PassportTx).
type WriteTx interface {
	// Write upserts the passports and inserts their outbox rows if absent;
	// recs are in input order and may repeat a route (the last record wins
	// the row, the first freezes the events).
	Write(ctx context.Context, recs []store.IngestRecord) error
	Commit(ctx context.Context) error
	// Rollback is safe after Commit.
	Rollback(ctx context.Context) error
}

// DLQ produces dead-letter records.
type DLQ interface {
	// Produce sends msgs and waits for their acknowledgements; the i-th
	// error is nil when msgs[i] was acknowledged by all in-sync replicas.
	Produce(ctx context.Context, msgs []DLQMessage) []error
}

// DLQMessage is a record for the dead-letter topic.
type DLQMessage struct {
	Key, Value []byte
	Headers    []Header
}

// Config configures [Run].
type Config struct {
	// ConsumerGroup is written to kafka_dlt-original-consumer-group.
	ConsumerGroup string
	// BatchSize is the most records per transaction (default 500).
	BatchSize int
	// BatchBytes is the most record value bytes per transaction (default
	// 16 MiB; a batch always takes at least one record), so that large
	// records cannot build a statement near PostgreSQL's 1 GiB message
	// limit.
	BatchBytes int
	// BatchMaxWait bounds how long a batch waits to fill (default 20ms;
	// [NoBatchWait] or any negative value: it does not wait, a free slot
	// takes what was polled).
	BatchMaxWait time.Duration
	// Limits are the parser's size limits.
	Limits passport.Limits
	// RecordRetries: a record the database alone rejects is retried this
	// many times before it is dead-lettered as RETRYABLE.
	RecordRetries int
	// MinBackoff and MaxBackoff bound the wait between retries while the
	// database or the DLQ is unavailable (defaults 100ms and 30s).
	MinBackoff, MaxBackoff time.Duration
	// Pipeline is how many batches may be in flight: 2 (the default) or 1
	// (strictly sequential writes).
	Pipeline int
	// WriteTimeout bounds each database call of a write attempt (begin,
	// write, commit; not the wait for the predecessor batch), default 30s;
	// a call that times out counts as the database being unavailable.
	WriteTimeout time.Duration
	// CommitTimeout bounds the wait for the synchronous offset commit on
	// revocation and on shutdown (default 5s).
	CommitTimeout time.Duration
	// RevokeTimeout bounds the wait for in-flight batches of revoked
	// partitions (default 10s); ShutdownTimeout the wait on shutdown
	// (default 20s, inside the 30s a pod gets).
	RevokeTimeout, ShutdownTimeout time.Duration
	// PauseRecords and PauseBytes: the poll loop pauses every partition
	// while more than this many records or bytes wait for a batch slot
	// (defaults max(20*BatchSize, 2000) and 64 MiB). Pausing drops
	// librdkafka's prefetched data and resuming refetches it, so the window
	// is wide and resumption starts at half of it, while plenty is left.
	PauseRecords, PauseBytes int

	// BeforeCommit, when set, is called before each offset commit; an
	// error skips that commit and every later one and ends Run with it.
	// Tests use it to simulate a crash between the database commit and the
	// offset commit.
	BeforeCommit func(offsets map[int32]int64) error
}

// NoBatchWait as Config.BatchMaxWait: batches do not wait to fill.
const NoBatchWait time.Duration = -1

func (c Config) withDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.BatchBytes = cmp.Or(c.BatchBytes, 16<<20)
	c.BatchMaxWait = cmp.Or(c.BatchMaxWait, 20*time.Millisecond)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 30*time.Second)
	c.CommitTimeout = cmp.Or(c.CommitTimeout, 5*time.Second)
	c.MinBackoff = cmp.Or(c.MinBackoff, 100*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 30*time.Second)
	if c.MaxBackoff < c.MinBackoff {
		c.MinBackoff = c.MaxBackoff
	}
	c.Pipeline = cmp.Or(c.Pipeline, 2)
	c.RevokeTimeout = cmp.Or(c.RevokeTimeout, 10*time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 20*time.Second)
	c.PauseRecords = cmp.Or(c.PauseRecords, max(20*c.BatchSize, 2000))
	c.PauseBytes = cmp.Or(c.PauseBytes, 64<<20)
	return c
}

// Validate reports a configuration Run cannot work with.
func (c Config) Validate() error {
	switch {
	case c.BatchSize < 0:
		return errors.New("ingest: BatchSize must not be negative")
	case c.BatchBytes < 0:
		return errors.New("ingest: BatchBytes must not be negative")
	case c.RecordRetries < 0:
		return errors.New("ingest: RecordRetries must not be negative")
	case c.Pipeline < 0 || c.Pipeline > 2:
		// The overlap check of a batch looks at its predecessor only,
		// which is enough while at most two batches are in flight.
		return errors.New("ingest: Pipeline must be 1 or 2")
	}
	return nil
}

// Readiness components reported by the ingestor.
const (
	ComponentPostgres = "postgres"
	ComponentDLQ      = "dlq"
)

// errCommitHook marks the error of Config.BeforeCommit.
var errCommitHook = errors.New("ingest: commit stopped by hook")

// Ingestor runs the consume → write/dead-letter → commit loop.
type Ingestor struct {
	logger   *slog.Logger
	cfg      Config
	consumer Consumer
	store    Store
	dlq      DLQ
	metrics  *Metrics
	ready    *obs.Readiness

	dbHealth  *health
	dlqHealth *health
	// dbWriters counts the batches writing valid records (fast or slow
	// path); while one is, only a successful write ends an outage.
	dbWriters atomic.Int32

	// owned maps each assigned partition to the epoch of its assignment;
	// batch goroutines read it to skip records of revoked partitions.
	ownedMu sync.RWMutex
	owned   map[int32]uint64
	epoch   uint64

	// poll loop state (poll goroutine only)
	tracker      *tracker
	pending      []*item
	pendingBytes int
	pendingSince time.Time
	inflight     int
	dispatched   map[int32]int // partition → records in in-flight batches
	results      chan *batch
	last         *batch // the most recently dispatched batch (chain tail)
	paused       map[int32]bool
	stopped      bool // BeforeCommit failed
	hookErr      error
	lagAt        time.Time
	batchCtx     context.Context
	wg           sync.WaitGroup
	seq          uint64
	finished     bool // Run is past its final commit

	// offset commits (poll goroutine only)
	commitRun     *commitCall // the Commit running, if any
	commitFailing bool
	commitNext    time.Time // while failing: no attempt before
	commitBo      *backoff
}

// New builds an Ingestor. reg-registered metrics come from NewMetrics.
func New(logger *slog.Logger, cfg Config, consumer Consumer, st Store, dlq DLQ, metrics *Metrics, ready *obs.Readiness) (*Ingestor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	in := &Ingestor{
		logger:     logger,
		cfg:        cfg,
		consumer:   consumer,
		store:      st,
		dlq:        dlq,
		metrics:    metrics,
		ready:      ready,
		owned:      map[int32]uint64{},
		tracker:    newTracker(),
		dispatched: map[int32]int{},
		results:    make(chan *batch, cfg.Pipeline),
		paused:     map[int32]bool{},
		commitBo:   newBackoff(time.Second, 10*time.Second),
	}
	in.dbHealth = newHealth(logger, ready, ComponentPostgres, "no successful database round trip yet")
	in.dlqHealth = newHealth(logger, ready, ComponentDLQ, "")
	return in, nil
}

// health tracks one dependency: readiness, and one log line per change.
type health struct {
	logger    *slog.Logger
	ready     *obs.Readiness
	component string
	// down: not ready (failing, or not yet seen working); outage: a
	// failure was seen and no success since (consumption pauses).
	down   atomic.Bool
	outage atomic.Bool
	mu     sync.Mutex
	since  time.Time
}

func newHealth(logger *slog.Logger, ready *obs.Readiness, component, initial string) *health {
	h := &health{logger: logger, ready: ready, component: component}
	if initial != "" {
		h.down.Store(true)
	}
	ready.Set(component, initial)
	return h
}

// ok marks the dependency working.
func (h *health) ok(ctx context.Context) { h.okIf(ctx, nil) }

// okIf marks the dependency working, but ends an outage only when mayEnd
// (nil: always) says so. A probe proves that the server answers, not that
// writes succeed: it may clear the initial "not reached yet" state, while
// an outage a write reported ends with a successful write.
func (h *health) okIf(ctx context.Context, mayEnd func() bool) {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return
	}
	if mayEnd != nil && h.outage.Load() && !mayEnd() {
		return
	}
	h.down.Store(false)
	h.outage.Store(false)
	h.ready.Set(h.component, "")
	if !h.since.IsZero() {
		h.logger.InfoContext(ctx, "ingest: "+h.component+" is back; resuming", "component", h.component, "outage", time.Since(h.since).Round(time.Millisecond))
	} else {
		h.logger.InfoContext(ctx, "ingest: "+h.component+" is reachable", "component", h.component)
	}
	h.since = time.Time{}
}

// fail marks the dependency unavailable.
func (h *health) fail(ctx context.Context, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outage.Load() {
		return
	}
	h.down.Store(true)
	h.outage.Store(true)
	h.since = time.Now()
	h.ready.Set(h.component, "unavailable")
	h.logger.ErrorContext(ctx, "ingest: "+h.component+" unavailable; pausing consumption and retrying", "component", h.component, "err", err)
}

func (in *Ingestor) ownedEpoch(p int32) (uint64, bool) {
	in.ownedMu.RLock()
	defer in.ownedMu.RUnlock()
	e, ok := in.owned[p]
	return e, ok
}

// stillOwned reports whether it's record still belongs to the assignment it
// was polled in.
func (in *Ingestor) stillOwned(it *item) bool {
	e, ok := in.ownedEpoch(it.rec.Partition)
	return ok && e == it.epoch
}

// Run consumes until ctx ends or a fatal error, then finishes (bounded) the
// batches in flight, commits what they finished and returns. The caller
// closes the consumer afterwards.
func (in *Ingestor) Run(ctx context.Context) error {
	batchCtx, cancelBatches := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBatches()
	in.batchCtx = batchCtx

	pingCtx, stopPing := context.WithCancel(ctx)
	defer stopPing()
	go in.probeDatabase(pingCtx)

	if err := in.consumer.Subscribe(in.onAssigned, in.onRevoked); err != nil {
		return err
	}
	err := in.loop(ctx)

	// Shutdown: stop polling, drop what was not batched, finish the rest.
	in.dropPending(nil)
	deadline := time.Now().Add(in.cfg.ShutdownTimeout)
	for in.inflight > 0 && time.Now().Before(deadline) && !in.stopped {
		select {
		case b := <-in.results:
			in.finish(b)
		case <-time.After(time.Until(deadline)):
		}
	}
	abandoned := in.inflight
	cancelBatches()
	in.wg.Wait()
	// The abandoned batches have reported (the results channel holds them
	// all); what they finished before the cancellation counts.
	in.drainResults()
	if abandoned > 0 {
		in.logger.WarnContext(ctx, "ingest: abandoned in-flight batches at shutdown; their unfinished records will be redelivered", "batches", abandoned)
	}
	in.commit(ctx, nil, in.cfg.CommitTimeout, true)
	// The revocation that closing the consumer triggers has nothing left
	// to wait for or commit.
	in.finished = true
	if in.hookErr != nil && err == nil {
		err = in.hookErr
	}
	return err
}

// probeDatabase pings until the first success, so /readyz turns ready
// without traffic, and then whenever the database is marked down and no
// batch is there to find out it is back. A ping does not end an outage
// that a batch still retrying reported: the server may answer and still
// refuse writes (read-only standby, disk full, missing table); that batch
// ends the outage when its write succeeds.
func (in *Ingestor) probeDatabase(ctx context.Context) {
	bo := newBackoff(in.cfg.MinBackoff, min(in.cfg.MaxBackoff, 5*time.Second))
	noWriter := func() bool { return in.dbWriters.Load() == 0 }
	for {
		wait := 5 * time.Second
		if in.dbHealth.down.Load() {
			wait = bo.next()
			if !in.dbHealth.outage.Load() || noWriter() {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := in.store.Ping(pctx)
				cancel()
				if err == nil {
					in.dbHealth.okIf(ctx, noWriter)
					if !in.dbHealth.down.Load() {
						bo.reset()
						wait = 5 * time.Second
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (in *Ingestor) loop(ctx context.Context) error {
	for {
		in.drainResults()
		if in.stopped {
			return in.hookErr
		}
		if ctx.Err() != nil {
			return nil
		}
		in.dispatch()
		in.commit(ctx, nil, 0, false)
		if in.stopped {
			return in.hookErr
		}
		if err := in.flowControl(ctx); err != nil {
			return err
		}
		in.updateLag()

		rec, err := in.consumer.Poll(in.pollTimeout())
		if err != nil {
			return err
		}
		if rec == nil {
			continue
		}
		epoch, ok := in.ownedEpoch(rec.Partition)
		if !ok {
			continue // a straggler of a revoked partition
		}
		if !in.tracker.Add(rec.Partition, rec.Offset) {
			continue // already polled in this assignment
		}
		if len(in.pending) == 0 {
			in.pendingSince = time.Now()
		}
		in.pending = append(in.pending, &item{rec: *rec, epoch: epoch})
		in.pendingBytes += len(rec.Value)
	}
}

func (in *Ingestor) pollTimeout() time.Duration {
	switch {
	case in.dbHealth.outage.Load() || in.dlqHealth.outage.Load():
		return 50 * time.Millisecond
	case in.batchFull():
		// A full batch waits for a slot; results arrive over a channel
		// that Poll cannot watch, so look again soon.
		return 2 * time.Millisecond
	case len(in.pending) > 0:
		if in.inflight >= in.cfg.Pipeline {
			// Waiting for a slot, as above; also when the batch is due
			// (or never waits, NoBatchWait): Poll(0) would spin.
			return 2 * time.Millisecond
		}
		return max(time.Until(in.pendingSince.Add(in.cfg.BatchMaxWait)), 0)
	case in.inflight > 0:
		return 5 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// batchFull reports whether the pending records fill a batch, by count or
// by bytes.
func (in *Ingestor) batchFull() bool {
	return len(in.pending) >= in.cfg.BatchSize || in.pendingBytes >= in.cfg.BatchBytes
}

// dispatch starts batches while there are slots and full (or old enough)
// batches.
func (in *Ingestor) dispatch() {
	for in.inflight < in.cfg.Pipeline && len(in.pending) > 0 {
		if !in.batchFull() && time.Since(in.pendingSince) < in.cfg.BatchMaxWait {
			return
		}
		// Up to BatchSize records and BatchBytes bytes, at least one.
		n, size := 0, 0
		for n < len(in.pending) && n < in.cfg.BatchSize {
			v := len(in.pending[n].rec.Value)
			if n > 0 && size+v > in.cfg.BatchBytes {
				break
			}
			size += v
			n++
		}
		items := make([]*item, n)
		copy(items, in.pending[:n])
		rest := copy(in.pending, in.pending[n:])
		clear(in.pending[rest:])
		in.pending = in.pending[:rest]
		for _, it := range items {
			in.pendingBytes -= len(it.rec.Value)
			in.dispatched[it.rec.Partition]++
		}
		in.pendingSince = time.Now()
		in.seq++
		b := newBatch(in.seq, items, in.last)
		in.last = b
		in.inflight++
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			in.process(in.batchCtx, b)
			in.results <- b
		}()
	}
}

func (in *Ingestor) drainResults() {
	for {
		select {
		case b := <-in.results:
			in.finish(b)
		default:
			return
		}
	}
}

// finish takes a batch's outcome into the tracker.
func (in *Ingestor) finish(b *batch) {
	in.inflight--
	for _, it := range b.items {
		in.dispatched[it.rec.Partition]--
		if it.done && in.stillOwned(it) {
			in.tracker.Done(it.rec.Partition, it.rec.Offset)
		}
	}
	if in.last == b {
		in.last = nil
	}
	b.items = nil // let the records go
}

// commitCall is one Commit running on a goroutine of its own.
type commitCall struct {
	offsets map[int32]int64
	epochs  map[int32]uint64 // assignment epoch of each partition
	done    chan error       // buffered: the goroutine never blocks
}

// commit commits the committable offsets of parts (nil: every tracked
// partition). Commit runs on a goroutine of its own, at most one at a time,
// so a coordinator that does not answer never stalls the poll loop; commit
// waits for it up to wait (0: not at all, a later pass takes the result).
// After a failure the poll loop tries again only after a backoff; force
// (revocation, shutdown) tries at once.
func (in *Ingestor) commit(ctx context.Context, parts []int32, wait time.Duration, force bool) {
	if in.stopped {
		return
	}
	deadline := time.Now().Add(wait)
	if in.commitRun != nil && !in.awaitCommit(ctx, deadline) {
		if force {
			in.logger.WarnContext(ctx, "ingest: an offset commit is still running; not committing again (records past the last committed offset will be redelivered)", "timeout", wait)
		}
		return
	}
	if !force && in.commitFailing && time.Now().Before(in.commitNext) {
		return
	}
	if parts == nil {
		parts = in.tracker.Partitions()
	}
	offsets := map[int32]int64{}
	epochs := map[int32]uint64{}
	for _, p := range parts {
		if off, ok := in.tracker.Committable(p); ok {
			offsets[p] = off
			epochs[p], _ = in.ownedEpoch(p)
		}
	}
	if len(offsets) == 0 {
		return
	}
	if in.cfg.BeforeCommit != nil {
		if err := in.cfg.BeforeCommit(offsets); err != nil {
			in.stopped = true
			in.hookErr = fmt.Errorf("%w: %w", errCommitHook, err)
			return
		}
	}
	c := &commitCall{offsets: offsets, epochs: epochs, done: make(chan error, 1)}
	in.commitRun = c
	go func() { c.done <- in.consumer.Commit(offsets) }()
	if !in.awaitCommit(ctx, deadline) && force {
		in.logger.WarnContext(ctx, "ingest: offset commit did not finish in time; records past the last committed offset will be redelivered", "timeout", wait)
	}
}

// awaitCommit waits until deadline (when past: not at all) for the running
// Commit and takes its result; it reports whether the Commit finished.
func (in *Ingestor) awaitCommit(ctx context.Context, deadline time.Time) bool {
	c := in.commitRun
	var err error
	if d := time.Until(deadline); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case err = <-c.done:
		case <-t.C:
			return false
		}
	} else {
		select {
		case err = <-c.done:
		default:
			return false
		}
	}
	in.commitRun = nil
	if err != nil {
		// Not fatal: the offsets stay committable and a later commit
		// carries them; a crash meanwhile only means redelivery. Logged
		// once per change of state, not on every attempt.
		if !in.commitFailing {
			in.commitFailing = true
			in.logger.WarnContext(ctx, "ingest: offset commit failed; retrying with backoff", "err", err)
		}
		in.commitNext = time.Now().Add(in.commitBo.next())
		return true
	}
	for p, off := range c.offsets {
		if e, ok := in.ownedEpoch(p); ok && e == c.epochs[p] {
			in.tracker.Committed(p, off)
		}
	}
	if in.commitFailing {
		in.commitFailing = false
		in.commitBo.reset()
		in.logger.InfoContext(ctx, "ingest: offset commits succeed again")
	}
	return true
}

// flowControl pauses every assigned partition while a dependency is down
// or too much waits for a batch slot, and resumes them afterwards.
func (in *Ingestor) flowControl(ctx context.Context) error {
	outage := in.outage()
	full := in.overfull()
	low := len(in.pending) < max(in.cfg.PauseRecords/2, in.cfg.BatchSize)
	in.ownedMu.RLock()
	var toPause, toResume []int32
	for p := range in.owned {
		switch {
		case (outage || full) && !in.paused[p]:
			toPause = append(toPause, p)
		case !outage && low && in.paused[p]:
			toResume = append(toResume, p)
		}
	}
	in.ownedMu.RUnlock()
	if len(toPause) > 0 {
		if err := in.consumer.Pause(toPause); err != nil {
			in.logger.WarnContext(ctx, "ingest: pause failed", "err", err)
		} else {
			for _, p := range toPause {
				in.paused[p] = true
			}
			in.logger.DebugContext(ctx, "ingest: paused partitions", "partitions", toPause, "outage", outage)
		}
	}
	if len(toResume) > 0 {
		if err := in.consumer.Resume(toResume); err != nil {
			in.logger.WarnContext(ctx, "ingest: resume failed", "err", err)
		} else {
			for _, p := range toResume {
				delete(in.paused, p)
			}
			in.logger.DebugContext(ctx, "ingest: resumed partitions", "partitions", toResume)
		}
	}
	return nil
}

// outage reports whether a dependency is down (consumption pauses).
func (in *Ingestor) outage() bool {
	return in.dbHealth.outage.Load() || in.dlqHealth.outage.Load()
}

// overfull reports whether too much waits for a batch slot (consumption
// pauses).
func (in *Ingestor) overfull() bool {
	return len(in.pending) >= in.cfg.PauseRecords || in.pendingBytes >= in.cfg.PauseBytes
}

func (in *Ingestor) updateLag() {
	if time.Since(in.lagAt) < time.Second {
		return
	}
	in.lagAt = time.Now()
	for _, p := range in.tracker.Partitions() {
		high, ok := in.consumer.HighWatermark(p)
		if !ok {
			continue
		}
		committed := in.tracker.CommittedOffset(p)
		if committed < 0 {
			continue
		}
		in.metrics.setLag(p, max(high-committed, 0))
	}
}

func (in *Ingestor) onAssigned(parts []int32) {
	in.ownedMu.Lock()
	for _, p := range parts {
		in.epoch++
		in.owned[p] = in.epoch
		in.tracker.Drop(p)
		delete(in.paused, p)
	}
	in.ownedMu.Unlock()
	// librdkafka keeps an application pause on the partition across
	// unassign and assign (confluent-kafka-go #193): a partition revoked
	// while paused would come back paused for good. Pause it again while
	// consumption is held back (flowControl resumes it), resume it
	// otherwise (harmless when it was not paused).
	ctx := context.Background()
	if hold := in.outage() || in.overfull(); hold {
		if err := in.consumer.Pause(parts); err != nil {
			in.logger.WarnContext(ctx, "ingest: pause failed", "err", err) // flowControl tries again
		} else {
			for _, p := range parts {
				in.paused[p] = true
			}
		}
	} else if err := in.consumer.Resume(parts); err != nil {
		in.logger.WarnContext(ctx, "ingest: resume failed", "err", err)
		for _, p := range parts {
			in.paused[p] = true // flowControl tries again
		}
	}
	in.logger.Info("ingest: partitions assigned", "topic_partitions", parts)
}

func (in *Ingestor) onRevoked(parts []int32, lost bool) {
	ctx := context.Background()
	revoked := make(map[int32]bool, len(parts))
	for _, p := range parts {
		revoked[p] = true
	}
	in.dropPending(revoked)
	if !lost && !in.finished {
		deadline := time.Now().Add(in.cfg.RevokeTimeout)
		for in.busy(parts) && time.Now().Before(deadline) {
			select {
			case b := <-in.results:
				in.finish(b)
			case <-time.After(time.Until(deadline)):
			}
		}
		in.commit(ctx, parts, in.cfg.CommitTimeout, true)
	}
	in.ownedMu.Lock()
	for _, p := range parts {
		delete(in.owned, p)
		delete(in.paused, p)
		in.tracker.Drop(p)
		in.metrics.dropLag(p)
	}
	in.ownedMu.Unlock()
	in.logger.Info("ingest: partitions revoked", "partitions", parts, "lost", lost)
}

// busy reports whether any of parts has records in in-flight batches.
func (in *Ingestor) busy(parts []int32) bool {
	for _, p := range parts {
		if in.dispatched[p] > 0 {
			return true
		}
	}
	return false
}

// dropPending forgets unbatched records of the given partitions (all when
// nil). They were never committed, so they will be polled again.
func (in *Ingestor) dropPending(parts map[int32]bool) {
	kept := in.pending[:0]
	for _, it := range in.pending {
		if parts == nil || parts[it.rec.Partition] {
			in.pendingBytes -= len(it.rec.Value)
			continue
		}
		kept = append(kept, it)
	}
	clear(in.pending[len(kept):])
	in.pending = kept
}
