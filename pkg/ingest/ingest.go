package ingest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcp/route-processing/pkg/backoff"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
)

// Consumer is the group consumer of the input topic; *kafkax.Consumer
// implements it. Every method but Commit and Probe is called from the
// goroutine running [Ingestor.Run] (the rebalance functions given to
// Subscribe run inside Poll, on that goroutine). Commit runs on a goroutine
// of its own, concurrently with the others, one call at a time, so that a
// coordinator that does not answer never stalls polling; Probe on the
// brokers' readiness watcher's (brokers.go), concurrently with all.
type Consumer interface {
	// Subscribe joins the group. assigned is called after partitions were
	// added to the assignment; revoked before they leave it (lost: the
	// membership was lost and committing is pointless).
	Subscribe(assigned func(partitions []int32), revoked func(partitions []int32, lost bool)) error
	// Poll returns the next record, or nil when none arrived within
	// timeout. An error is fatal.
	Poll(timeout time.Duration) (*record.Record, error)
	// Pause stops fetching the partitions; Resume restarts from the record
	// after the last one Poll returned.
	Pause(partitions []int32) error
	Resume(partitions []int32) error
	// Commit synchronously commits, per partition, the next offset to read.
	Commit(offsets map[int32]int64) error
	// Probe reports whether a broker answers a metadata request within
	// timeout and ctx's deadline, and whether the input topic can be
	// used: a *record.TopicError when the brokers answer without it, so
	// that /readyz names the topic.
	Probe(ctx context.Context, timeout time.Duration) error
	// HighWatermark returns the last known high watermark of a partition,
	// asking the broker for it (a paused partition's) only until askUntil.
	HighWatermark(partition int32, askUntil time.Time) (int64, bool)
	// Committed asks the group coordinator for the committed offsets of
	// partitions (the next to read), waiting up to timeout; a partition
	// with none is left out.
	Committed(partitions []int32, timeout time.Duration) (map[int32]int64, error)
}

// Store writes accepted passports; *store.Passports implements it. Errors
// are classified with store.Classify.
type Store interface {
	// Write writes accepted in a transaction of its own and commits it.
	Write(ctx context.Context, accepted []passport.Accepted) error
	// BeginWrite begins a transaction on a connection of its own and
	// writes accepted in it; the caller commits or rolls back. The server
	// ends the session if the transaction sits idle for maxIdle (or for
	// less, when the operator set a stricter bound).
	BeginWrite(ctx context.Context, accepted []passport.Accepted, maxIdle time.Duration) (store.WriteTx, error)
	// Ping makes one round trip.
	Ping(ctx context.Context) error
	// Stuck fails when the writer's sessions wait for a lock that nobody
	// is working to release (a table lock, a row lock of an idle
	// transaction).
	Stuck(ctx context.Context) error
	// CheckSchema fails (a *store.SchemaError) when the database's schema
	// is older than this build's.
	CheckSchema(ctx context.Context) error
}

// DLQ produces dead-letter records; *kafkax.Producer implements it.
type DLQ interface {
	// ProduceBatch sends recs and waits for their acknowledgements; the
	// i-th error is nil when recs[i] was acknowledged by all in-sync
	// replicas.
	ProduceBatch(ctx context.Context, recs []record.Record) []error
	// TooLarge reports whether a ProduceBatch error says the record
	// exceeds a size limit.
	TooLarge(err error) bool
	// Probe reports whether a broker answers a metadata request for topic
	// within timeout, and a *record.TopicError when the answer has no
	// usable topic (readiness names it); it is cheap, and runs while dead
	// letters wait.
	Probe(ctx context.Context, topic string, timeout time.Duration) error
}

// Readiness components reported by the ingestor.
const (
	ComponentPostgres = "postgres"
	ComponentDLQ      = "dlq"
	ComponentKafka    = "kafka" // the input's brokers
)

// The reasons /readyz gives before the database and the brokers first
// answered.
const (
	notReachedYet = "no successful database round trip yet"
	notProbedYet  = "not probed yet"
)

// SetNotReadyYet registers the ingestor's dependencies as not reached yet.
// New does it too; a binary calls it before it serves /readyz, so that no
// answer says 200 before New has run.
func SetNotReadyYet(ready *obs.Readiness) {
	ready.Set(ComponentPostgres, notReachedYet)
	// Not ready until the first probe answered: a probe of unreachable
	// brokers takes its whole wait.
	ready.Set(ComponentKafka, notProbedYet)
}

// errCommitHook marks the error of Config.BeforeCommit.
var errCommitHook = errors.New("ingest: commit stopped by hook")

// Ingestor runs the consume → write/dead-letter → commit loop. The loop's
// concerns live in files of their own: poll.go (polling and dispatch),
// parse.go (parsing while records wait), batch.go (one batch), batchcap.go
// (smaller batches while writes outrun their bound), write.go (the
// database write: the pipelined attempt) and writeslow.go (the careful way
// after it failed: record by record, spans split), deadletter.go (and the
// DLQ's probe), tracker.go (how far each partition's offset may be
// committed) and commit.go (the commits), flow.go (pause/resume), lag.go
// (the lag gauges), rebalance.go, health.go (a dependency's state and its
// watcher), callwatch.go (the calls outstanding), dbprobe.go (the
// database's probes), brokers.go (the input brokers' readiness), trace.go
// (spans), metrics.go and config.go.
type Ingestor struct {
	logger      *slog.Logger
	cfg         Config
	consumer    Consumer
	store       Store
	deadLetters DLQ
	metrics     *Metrics
	ready       *obs.Readiness

	dbHealth  *health
	dlqHealth *health
	// dbWriters counts the batches writing valid records (fast or slow
	// path); while one is, only a successful write ends an outage.
	dbWriters atomic.Int32
	// dlqWriters counts the dead-letter writes running, the same way.
	dlqWriters atomic.Int32

	// owned maps each assigned partition to the epoch of its assignment;
	// batch goroutines read it to skip records of revoked partitions.
	ownedMu sync.RWMutex
	owned   map[int32]uint64
	epoch   uint64

	// poll loop state (poll goroutine only)
	tracker      *tracker
	pending      []*item
	pendingBytes int
	batchCap     batchCap
	// caughtUp: the last Poll returned nothing, so pending holds all that
	// has arrived.
	caughtUp   bool
	inflight   int
	dispatched map[int32]int // partition → records in in-flight batches
	results    chan *batch
	parsedUpTo int    // pending[:parsedUpTo] are parsed (parse.go)
	last       *batch // the most recently dispatched batch (chain tail)
	paused     map[int32]bool
	hookErr    error // BeforeCommit failed: the loop stops with it
	lagAt      time.Time
	// groupOffsets are the group's committed offsets of assigned
	// partitions nothing was polled from yet, asked at groupAskedAt
	// (updateLag); forgotten when a partition is assigned or revoked.
	groupOffsets map[int32]int64
	groupAskedAt time.Time
	wg           sync.WaitGroup
	finished     bool      // Run is past its final commit
	stopAt       time.Time // when the poll goroutine first saw the stop (shutdownDeadline)

	// offset commits (poll goroutine only)
	commitRun     *commitCall // the Commit running, if any
	commitFailing bool
	commitNext    time.Time // while failing: no attempt before
	commitLast    time.Time // when the last Commit started (CommitInterval)
	commitBo      *backoff.Backoff
}

// New builds an Ingestor. metrics come from NewMetrics.
func New(logger *slog.Logger, cfg Config, consumer Consumer, st Store, dl DLQ, metrics *Metrics, ready *obs.Readiness) (*Ingestor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger = logger.With("component", "ingest")
	in := &Ingestor{
		logger:       logger,
		cfg:          cfg,
		consumer:     consumer,
		store:        st,
		deadLetters:  dl,
		metrics:      metrics,
		ready:        ready,
		owned:        map[int32]uint64{},
		groupOffsets: map[int32]int64{},
		tracker:      newTracker(),
		batchCap:     newBatchCap(cfg.BatchSize),
		dispatched:   map[int32]int{},
		results:      make(chan *batch, cfg.Pipeline),
		paused:       map[int32]bool{},
		commitBo:     backoff.New(time.Second, 10*time.Second),
	}
	in.dbHealth = newHealth(logger, ready, ComponentPostgres, notReachedYet, obs.DBSymptom)
	in.dlqHealth = newHealth(logger, ready, ComponentDLQ, "", dlqSymptom)
	SetNotReadyYet(ready)
	return in, nil
}

// DBTimeout is the bound of each database call in effect (INGEST_DB_TIMEOUT
// or its default derived from the batch size).
func (in *Ingestor) DBTimeout() time.Duration { return in.cfg.DBTimeout }

// Run consumes until ctx ends or a fatal error, then finishes (bounded) the
// batches in flight, commits what they finished and returns. The caller
// closes the consumer afterwards.
func (in *Ingestor) Run(ctx context.Context) error {
	// Batches outlive ctx by up to ShutdownTimeout, so they run on a
	// context of their own, cancelled when that wait ends.
	batchCtx, cancelBatches := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBatches()

	// The watchers run until Run returns, not until ctx ends: during the
	// shutdown's drain a batch still needs the probe that cuts a call on a
	// dead link and wakes a retry once the database is back. Run waits for
	// them, because the caller closes the Kafka clients next, and a probe
	// may be inside a librdkafka call on them (a metadata request, up to
	// probeWaitMax), which librdkafka forbids while the client is destroyed.
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	var watchers sync.WaitGroup
	defer func() {
		stopWatch()
		watchers.Wait()
	}()
	// A database call is probed before its bound runs out, however short
	// the bound: a timeout while the database answers is a slow database,
	// so only the probe can tell a stuck write (probeDB).
	watchers.Go(func() {
		in.watch(watchCtx, in.dbHealth, in.probeDB, in.store.Ping, min(stallAfter, in.cfg.DBTimeout/2), &in.dbWriters)
	})
	// No idle probe for the DLQ (nil): its brokers are the input's, which
	// watchBrokers probes every second, idle or not (component "kafka").
	watchers.Go(func() { in.watch(watchCtx, in.dlqHealth, in.probeDLQ, nil, stallAfter, &in.dlqWriters) })
	watchers.Go(func() { in.watchBrokers(watchCtx) })

	// The client calls the revocation without a context; its wait must
	// still end with the shutdown's when the stop comes.
	revoked := func(parts []int32, lost bool) { in.onRevoked(ctx.Done(), parts, lost) }
	if err := in.consumer.Subscribe(in.onAssigned, revoked); err != nil {
		return err
	}
	err := in.loop(ctx, batchCtx)

	// Shutdown: stop polling, drop what was not batched, finish the rest.
	in.dropPending(nil)
	in.finishWhile(nil, in.shutdownDeadline(), func() bool { return in.inflight > 0 && in.hookErr == nil })
	abandoned := in.inflight
	cancelBatches()
	in.wg.Wait()
	// The abandoned batches have reported (the results channel holds them
	// all); what they finished before the cancellation counts.
	in.drainResults()
	if abandoned > 0 {
		in.logger.WarnContext(ctx, "abandoned in-flight batches at shutdown; their unfinished records will be redelivered", "batches", abandoned)
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
