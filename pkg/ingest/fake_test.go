package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/passport"
	"github.com/pcp/route-processing/pkg/record"
	"github.com/pcp/route-processing/pkg/store"
)

// Tests with in-memory fakes of the consumer, the store and the DLQ, for
// what a real broker or database cannot be made to do on cue.

// fakeConsumer is an in-memory group consumer. Like librdkafka, it keeps a
// partition's application pause flag across unassign and assign.
type fakeConsumer struct {
	mu        sync.Mutex
	log       map[int32][]record.Record
	assigned  map[int32]bool
	paused    map[int32]bool
	pos       map[int32]int64
	committed map[int32]int64
	events    []func() // rebalances to run in the next Poll
	running   bool     // a rebalance function runs
	assignedF func([]int32)
	revokedF  func([]int32, bool)

	blockingPolls atomic.Int32 // Poll calls allowed to wait (timeout > 0)
	commitCalls   atomic.Int32
	commitErr     atomic.Pointer[error]
	commitGate    chan struct{} // when set, Commit blocks until it is closed
	probeErr      atomic.Pointer[error]
	// probeTakes is how long Probe runs, whatever its context, as
	// librdkafka's metadata request does; probing counts the Probes in
	// progress.
	probeTakes atomic.Int64
	probing    atomic.Int32
	// pollErr, when set, is what every Poll returns (a fatal error of the
	// client, or a change of the assignment it refused in a rebalance).
	pollErr atomic.Pointer[error]
}

func newFakeConsumer(partitions ...int32) *fakeConsumer {
	c := &fakeConsumer{log: map[int32][]record.Record{}, assigned: map[int32]bool{}, paused: map[int32]bool{},
		pos: map[int32]int64{}, committed: map[int32]int64{}}
	c.queueAssign(partitions...)
	return c
}

func (c *fakeConsumer) add(p int32, values ...[]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range values {
		off := int64(len(c.log[p]))
		c.log[p] = append(c.log[p], record.Record{Topic: "in", Partition: p, Offset: off, Value: v,
			Timestamp: time.Now(), TimestampType: record.TimestampCreateTime})
	}
}

func (c *fakeConsumer) queueAssign(parts ...int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, func() {
		c.mu.Lock()
		for _, p := range parts {
			c.assigned[p] = true
			c.pos[p] = c.committed[p]
		}
		c.mu.Unlock()
		c.assignedF(parts)
	})
}

func (c *fakeConsumer) queueRevoke(parts ...int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, func() {
		c.revokedF(parts, false)
		c.mu.Lock()
		for _, p := range parts {
			delete(c.assigned, p)
		}
		c.mu.Unlock()
	})
}

// rewind moves p's log and position back as librdkafka's
// auto.offset.reset=earliest does when the log under the position changed:
// the log is cut to its first from records and values follow, and the
// position goes to from. Deleting the topic (from 0) also deletes the
// group's offset.
func (c *fakeConsumer) rewind(p int32, from int64, values ...[]byte) {
	c.mu.Lock()
	c.log[p] = c.log[p][:from]
	c.pos[p] = from
	if from == 0 {
		delete(c.committed, p)
	}
	c.mu.Unlock()
	c.add(p, values...)
}

func (c *fakeConsumer) eventsDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events) == 0 && !c.running
}

func (c *fakeConsumer) isPaused(p int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused[p]
}

func (c *fakeConsumer) committedAt(p int32) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.committed[p]
}

func (c *fakeConsumer) Subscribe(assigned func([]int32), revoked func([]int32, bool)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.assignedF, c.revokedF = assigned, revoked
	return nil
}

// Probe answers after probeTakes (at once by default): nil, or the error
// set in probeErr.
func (c *fakeConsumer) Probe(ctx context.Context, _ time.Duration) error {
	c.probing.Add(1)
	defer c.probing.Add(-1)
	time.Sleep(time.Duration(c.probeTakes.Load()))
	if err := c.probeErr.Load(); err != nil {
		return *err
	}
	return ctx.Err()
}

func (c *fakeConsumer) Poll(timeout time.Duration) (*record.Record, error) {
	if timeout > 0 {
		c.blockingPolls.Add(1)
	}
	if err := c.pollErr.Load(); err != nil {
		return nil, *err
	}
	c.mu.Lock()
	if len(c.events) > 0 {
		ev := c.events[0]
		c.events = c.events[1:]
		c.running = true
		c.mu.Unlock()
		ev()
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		return nil, nil
	}
	for p := range c.assigned {
		if c.paused[p] || c.pos[p] >= int64(len(c.log[p])) {
			continue
		}
		r := c.log[p][c.pos[p]]
		c.pos[p]++
		c.mu.Unlock()
		return &r, nil
	}
	c.mu.Unlock()
	time.Sleep(min(timeout, 5*time.Millisecond))
	return nil, nil
}

func (c *fakeConsumer) Pause(parts []int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		c.paused[p] = true
	}
	return nil
}

func (c *fakeConsumer) Resume(parts []int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		delete(c.paused, p)
	}
	return nil
}

func (c *fakeConsumer) Commit(offsets map[int32]int64) error {
	c.commitCalls.Add(1)
	c.mu.Lock()
	gate := c.commitGate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if e := c.commitErr.Load(); e != nil {
		return *e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, o := range offsets {
		c.committed[p] = max(c.committed[p], o)
	}
	return nil
}

// Committed answers as a group whose uncommitted partitions start at
// their first record (auto.offset.reset=earliest).
func (c *fakeConsumer) Committed(partitions []int32, _ time.Duration) (map[int32]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int32]int64{}
	for _, p := range partitions {
		out[p] = c.committed[p]
	}
	return out, nil
}

func (c *fakeConsumer) HighWatermark(p int32, _ time.Time) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.log[p])), true
}

// fakeStore keeps written passports in memory; fail decides the outcome of
// each write.
type fakeStore struct {
	mu       sync.Mutex
	written  map[string]int // route id → times written
	batches  []int          // value bytes of each committed write
	counts   []int          // records of each committed write
	fail     func(recs []passport.Accepted) error
	pingFail func() error
}

func newFakeStore() *fakeStore { return &fakeStore{written: map[string]int{}} }

func (s *fakeStore) setFail(f func([]passport.Accepted) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

func (s *fakeStore) setPingFail(f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pingFail = f
}

// holdWrites makes the first n writes of s block, their batches'
// statements running, until release(i) lets the i-th (from 1) go; calls
// counts the writes. Called after startFake, its cleanup releases every
// write before startFake's waits for Run, so a failing test does not hang.
func holdWrites(t *testing.T, s *fakeStore, n int) (calls *atomic.Int32, release func(i int)) {
	calls = new(atomic.Int32)
	gates := make([]func(), n)
	held := make([]chan struct{}, n)
	for i := range n {
		held[i] = make(chan struct{})
		gates[i] = sync.OnceFunc(func() { close(held[i]) })
		t.Cleanup(gates[i])
	}
	s.setFail(func([]passport.Accepted) error {
		if i := int(calls.Add(1)); i <= n {
			<-held[i-1]
		}
		return nil
	})
	return calls, func(i int) { gates[i-1]() }
}

func (s *fakeStore) routes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.written)
}

func (s *fakeStore) Write(ctx context.Context, recs []passport.Accepted) error {
	tx, err := s.BeginWrite(ctx, recs, 0)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *fakeStore) BeginWrite(ctx context.Context, recs []passport.Accepted, _ time.Duration) (store.WriteTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	f := s.fail
	s.mu.Unlock()
	if f != nil {
		if err := f(recs); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &fakeTx{s: s, recs: recs}, nil
}

// Stuck is a query like Ping: it fails as Ping does (nothing is stuck).
func (s *fakeStore) Stuck(ctx context.Context) error { return s.Ping(ctx) }

// CheckSchema: the fake's schema is always this build's (the probe's
// answers are Stuck's, that is the scripted pings).
func (s *fakeStore) CheckSchema(ctx context.Context) error { return ctx.Err() }

func (s *fakeStore) Ping(ctx context.Context) error {
	s.mu.Lock()
	f := s.pingFail
	s.mu.Unlock()
	if f != nil {
		return f()
	}
	return ctx.Err()
}

type fakeTx struct {
	s    *fakeStore
	recs []passport.Accepted
}

func (t *fakeTx) Commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	size := 0
	for _, r := range t.recs {
		t.s.written[r.Passport.RouteID]++
		size += len(r.Source.Value)
	}
	t.s.batches = append(t.s.batches, size)
	t.s.counts = append(t.s.counts, len(t.recs))
	return nil
}

func (t *fakeTx) Rollback(context.Context) error { return nil }

type fakeDLQ struct {
	n        atomic.Int32
	gate     chan struct{}         // when set, ProduceBatch waits until it is closed
	probeErr atomic.Pointer[error] // Probe's answer when set
}

func (d *fakeDLQ) ProduceBatch(_ context.Context, recs []record.Record) []error {
	if d.gate != nil {
		<-d.gate
	}
	d.n.Add(int32(len(recs)))
	return make([]error, len(recs))
}

func (d *fakeDLQ) TooLarge(error) bool { return false }

func (d *fakeDLQ) Probe(ctx context.Context, _ string, _ time.Duration) error {
	if err := d.probeErr.Load(); err != nil {
		return *err
	}
	return ctx.Err()
}

// logCounter counts log records whose message contains a substring.
type logCounter struct {
	slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func (h logCounter) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.msgs = append(*h.msgs, r.Message)
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return logCounter{h.Handler.WithAttrs(as), h.mu, h.msgs}
}

func (h logCounter) count(sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range *h.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

type fakeRun struct {
	in     *ingest.Ingestor
	ready  *obs.Readiness
	reg    *prometheus.Registry
	logs   logCounter
	cancel func()
	done   chan error
}

func startFake(t *testing.T, c *fakeConsumer, s *fakeStore, d *fakeDLQ, mods ...func(*ingest.Config)) *fakeRun {
	t.Helper()
	var mu sync.Mutex
	var msgs []string
	h := logCounter{slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}), &mu, &msgs}
	reg := obs.NewRegistry()
	ready := obs.NewReadiness(reg, "route_passport_ingest")
	cfg := ingest.Config{
		ConsumerGroup: "g", BatchSize: 500, RecordRetries: 1,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		RevokeTimeout: 300 * time.Millisecond, ShutdownTimeout: time.Second, CommitTimeout: 300 * time.Millisecond,
	}
	for _, m := range mods {
		m(&cfg)
	}
	in, err := ingest.New(slog.New(h), cfg, c, s, d, ingest.NewMetrics(reg), ready)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &fakeRun{in: in, ready: ready, reg: reg, logs: h, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	return r
}

func (r *fakeRun) stop(t *testing.T) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err, time.Since(start)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s")
	}
	return nil, 0
}

func values(t *testing.T, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = passportValue(t, uuid.NewString(), fmt.Sprintf("route %03d", i))
	}
	return out
}

var errDown = errors.New("connection refused (fake)")

// A missing input topic is named in readiness as the topic's fault, not
// the brokers'.
func TestFakeMissingInputTopicReadiness(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	var missing error = &record.TopicError{Topic: "in", Err: errors.New("Broker: Unknown topic or partition")}
	c.probeErr.Store(&missing)
	r := startFake(t, c, newFakeStore(), &fakeDLQ{})
	require.Eventually(t, func() bool {
		err := r.ready.Check()
		return err != nil && strings.Contains(err.Error(), "kafka: input topic in: Broker: Unknown topic or partition")
	}, 5*time.Second, 5*time.Millisecond, "readiness: %v", r.ready.Check())
	require.Equal(t, 1, r.logs.count("the brokers answer without the input topic"))
	require.Zero(t, r.logs.count("kafka unreachable"), "the brokers answered")
}

// Brokers unreachable at start, then answering without the input topic:
// each cause has its line. Before, a line came only when readiness
// flipped, so the log kept saying "unreachable" while the topic was what
// was missing.
func TestFakeInputTopicMissingAfterUnreachableIsLogged(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	var unreachable error = errors.New("Local: Broker transport failure")
	c.probeErr.Store(&unreachable)
	r := startFake(t, c, newFakeStore(), &fakeDLQ{})
	require.Eventually(t, func() bool { return r.logs.count("kafka unreachable") == 1 }, 5*time.Second, 5*time.Millisecond)

	var missing error = &record.TopicError{Topic: "in", Err: errors.New("Broker: Unknown topic or partition")}
	c.probeErr.Store(&missing)
	require.Eventually(t, func() bool {
		err := r.ready.Check()
		return err != nil && strings.Contains(err.Error(), "kafka: input topic in")
	}, 5*time.Second, 5*time.Millisecond, "readiness: %v", r.ready.Check())
	require.Equal(t, 1, r.logs.count("the brokers answer without the input topic"))

	c.probeErr.Store(nil)
	require.Eventually(t, func() bool { return r.logs.count("kafka reachable") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, r.logs.count("kafka unreachable"), "one line per change of cause")
}

// Run returns only once its probes have: the caller closes the Kafka
// clients next, which librdkafka forbids while a call (the brokers'
// probe, a metadata request) is inside them. Before, Run returned with a
// probe in progress.
func TestFakeRunWaitsForItsProbes(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.probeTakes.Store(int64(400 * time.Millisecond))
	r := startFake(t, c, newFakeStore(), &fakeDLQ{})
	deadline := time.Now().Add(5 * time.Second)
	for c.probing.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "no probe of the brokers started")
		time.Sleep(5 * time.Millisecond)
	}
	err, took := r.stop(t)
	require.NoError(t, err)
	require.Zero(t, c.probing.Load(), "a probe still in the client after Run returned (%s after the cancel)", took)
}

// A dead letter outstanding while the brokers answer without the DLQ topic
// (a broker that does not create topics on demand): the ingestor is not
// ready within the stall probe's second or so, /readyz names the topic,
// and it is ready again once the letter is acknowledged.
func TestFakeMissingDLQTopicIsNamed(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	d := &fakeDLQ{gate: make(chan struct{})}
	var missing error = &record.TopicError{Topic: "dlq", Err: errors.New("Broker: Unknown topic or partition")}
	d.probeErr.Store(&missing)
	r := startFake(t, c, newFakeStore(), d)
	release := sync.OnceFunc(func() { close(d.gate) })
	t.Cleanup(release)
	c.add(0, []byte("not json"))
	start := time.Now()
	require.Eventually(t, func() bool {
		err := r.ready.Check()
		return err != nil && strings.Contains(err.Error(), "dlq: topic dlq: Broker: Unknown topic or partition")
	}, 10*time.Second, 5*time.Millisecond, "readiness: %v", r.ready.Check())
	t.Logf("figures: not ready %s after the dead letter was sent", time.Since(start).Round(time.Millisecond))

	d.probeErr.Store(nil)
	release()
	require.Eventually(t, func() bool { return r.ready.Check() == nil && c.committedAt(0) == 1 }, 10*time.Second, 5*time.Millisecond)
}

// When the client moves a partition's position back within an assignment
// (its topic deleted and created again, or its log truncated), the records
// from there on are new and are written; the committed offsets follow the
// new log. Before, offsets not past the last one polled were taken for
// redeliveries and skipped, and the records after them committed over
// the skipped ones.
func TestFakeRewoundPartitionIsReadAgain(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0, 1)
	c.add(0, values(t, 22)...)
	c.add(1, values(t, 22)...)
	s := newFakeStore()
	r := startFake(t, c, s, &fakeDLQ{})
	require.Eventually(t, func() bool { return c.committedAt(0) == 22 && c.committedAt(1) == 22 }, 5*time.Second, time.Millisecond)

	c.rewind(0, 0, values(t, 25)...)  // recreated: offsets 0–24, new records
	c.rewind(1, 10, values(t, 15)...) // truncated at 10, then 15 new records
	require.Eventually(t, func() bool { return c.committedAt(0) == 25 && c.committedAt(1) == 25 }, 5*time.Second, time.Millisecond,
		"committed: %d, %d", c.committedAt(0), c.committedAt(1))
	require.Equal(t, 22+22+25+15, s.routes(), "every record of the new logs is written")
	require.Equal(t, 2, r.logs.count("the partition's offsets went back"))
}

// A log truncated below what was polled (librdkafka seeks to where an
// unclean leader election cut it): the records below the cut are still the
// log's and are written, those above it are other records and are polled
// again. Before, everything pending for the partition was dropped and the
// records between the last commit and the cut were never written.
func TestFakeTruncatedPartitionKeepsWhatLiesBelow(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	r := startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) { cfg.BatchSize = 5 })
	calls, release := holdWrites(t, s, 2)
	c.add(0, values(t, 30)...)
	require.Eventually(t, func() bool { return calls.Load() == 2 && r.stageCount(t, "parsed") == 30 }, 5*time.Second, time.Millisecond,
		"0–9 held in two writes, 10–29 polled and waiting")
	c.rewind(0, 20, values(t, 5)...)
	release(1)
	release(2)
	assert.Eventually(t, func() bool { return c.committedAt(0) == 25 && s.routes() == 25 }, 5*time.Second, time.Millisecond)
	_, _ = r.stop(t)
	require.Equal(t, int64(25), c.committedAt(0), "committed to the new log's end")
	require.Equal(t, 25, s.routes(), "0–19 and the 5 new records; the old ones above the cut dropped")
	require.Equal(t, 1, r.logs.count("the partition's offsets went back"))
}

// A partition paused during an outage, revoked and assigned again, must
// not stay paused: librdkafka keeps the pause across the reassignment.
func TestFakePausedPartitionReassigned(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0, 1)
	c.add(0, values(t, 20)...)
	c.add(1, values(t, 20)...)
	s := newFakeStore()
	s.setFail(func([]passport.Accepted) error { return errDown })
	// The outage begins with the first write (the probe before it reads
	// the schema, which the fake answers).
	s.setPingFail(func() error { return errDown })
	startFake(t, c, s, &fakeDLQ{})

	require.Eventually(t, func() bool { return c.isPaused(0) && c.isPaused(1) }, 10*time.Second, 5*time.Millisecond, "paused by the outage")
	// Revoked while paused; the outage ends (partition 0 resumes) before
	// partition 1 comes back.
	c.queueRevoke(1)
	require.Eventually(t, c.eventsDone, 10*time.Second, 5*time.Millisecond)
	s.setFail(nil)
	s.setPingFail(nil)
	require.Eventually(t, func() bool { return !c.isPaused(0) }, 10*time.Second, 5*time.Millisecond, "partition 0 resumed")
	c.queueAssign(1)
	require.Eventually(t, func() bool { return s.routes() == 40 }, 10*time.Second, 10*time.Millisecond,
		"every record written (partition 1 resumed)")
	require.Eventually(t, func() bool { return c.committedAt(0) == 20 && c.committedAt(1) == 20 }, 10*time.Second, 10*time.Millisecond)
	require.False(t, c.isPaused(1))
}

// A partition assigned during an outage is paused until the outage ends;
// its lag shows meanwhile, counted from the group's committed offset
// (nothing was polled from it).
func TestFakeAssignedDuringOutage(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 20)...)
	c.add(1, values(t, 20)...)
	s := newFakeStore()
	s.setFail(func([]passport.Accepted) error { return errDown })
	// The outage begins with the first write (the probe before it reads
	// the schema, which the fake answers).
	s.setPingFail(func() error { return errDown })
	r := startFake(t, c, s, &fakeDLQ{})
	require.Eventually(t, func() bool { return c.isPaused(0) }, 10*time.Second, 5*time.Millisecond, "paused by the outage")
	c.queueAssign(1)
	require.Eventually(t, c.eventsDone, 10*time.Second, 5*time.Millisecond)
	require.True(t, c.isPaused(1), "paused at once while the outage lasts")
	require.Eventually(t, func() bool { return lagOf(t, r)["1"] == 20 }, 10*time.Second, 20*time.Millisecond,
		"the lag of the partition assigned during the outage")
	s.setFail(nil)
	s.setPingFail(nil)
	require.Eventually(t, func() bool { return s.routes() == 40 }, 10*time.Second, 10*time.Millisecond)
}

// A stop that comes while a revocation waits for its partition's batch does
// not add the shutdown's wait to the revocation's: both end ShutdownTimeout
// after the stop. Before, Run waited out the rest of RevokeTimeout and then
// ShutdownTimeout again (past the contract's 30 s with the defaults, 10 s
// and 12 s, and the commits and close after them).
func TestFakeStopDuringARevocation(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0, 1)
	c.add(0, values(t, 5)...)
	c.add(1, values(t, 5)...)
	s := newFakeStore()
	// The database is down: the batch stays in flight, retrying.
	s.setFail(func([]passport.Accepted) error { return errDown })
	s.setPingFail(func() error { return errDown })
	const shutdown = 2 * time.Second
	r := startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) {
		cfg.RevokeTimeout, cfg.ShutdownTimeout = 5*time.Second, shutdown
	})
	require.Eventually(t, func() bool { return c.isPaused(0) }, 10*time.Second, 5*time.Millisecond, "paused by the outage")
	c.queueRevoke(0)
	time.Sleep(300 * time.Millisecond) // the revocation is waiting for partition 0's batch
	require.False(t, c.eventsDone(), "the revocation still waits")

	_, took := r.stop(t)
	require.Less(t, took, shutdown+time.Second, "Run returned within ShutdownTimeout of the stop (and the commit's bound)")
	require.Greater(t, took, shutdown-500*time.Millisecond, "the batch was waited for until the shutdown's deadline")
}

// The lag of each assigned partition shows while an outage at start keeps
// anything from being committed: the backlog that builds is what the lag
// alert and the autoscaler watch. (No series appeared before the first
// commit of the assignment.)
func TestFakeLagShowsBeforeTheFirstCommit(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0, 1)
	c.add(0, values(t, 7)...)
	c.add(1, values(t, 5)...)
	s := newFakeStore()
	s.setFail(func([]passport.Accepted) error { return errDown })
	s.setPingFail(func() error { return errDown })
	r := startFake(t, c, s, &fakeDLQ{})
	lag := func() map[string]float64 { return lagOf(t, r) }
	require.Eventually(t, func() bool {
		l := lag()
		return l["0"] == 7 && l["1"] == 5
	}, 10*time.Second, 20*time.Millisecond, "the lag of both partitions during the outage")
	require.Zero(t, c.committedAt(0))
	require.Zero(t, c.committedAt(1))
	s.setFail(nil)
	s.setPingFail(nil)
	require.Eventually(t, func() bool {
		l := lag()
		return l["0"] == 0 && l["1"] == 0
	}, 10*time.Second, 20*time.Millisecond, "none once written and committed")
}

// lagOf reads the consumer lag gauge of each partition.
func lagOf(t *testing.T, r *fakeRun) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "route_passport_ingest_consumer_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// With nothing held back, a reassigned partition is resumed explicitly.
func TestFakeReassignedPartitionResumedWhenHealthy(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer()
	c.add(0, values(t, 5)...)
	c.mu.Lock()
	c.paused[0] = true // left over from an earlier assignment
	c.mu.Unlock()
	c.queueAssign(0)
	s := newFakeStore()
	startFake(t, c, s, &fakeDLQ{})
	require.Eventually(t, func() bool { return s.routes() == 5 }, 10*time.Second, 10*time.Millisecond)
}

// A database that answers pings but refuses writes stays not ready until a
// write succeeds; nothing is dead-lettered.
func TestFakeReadOnlyDatabaseStaysNotReady(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 30)...)
	s := newFakeStore()
	readOnly := &pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}
	s.setFail(func([]passport.Accepted) error { return readOnly })
	// Pings fail too, so that the probe pings often (backoff); the probe
	// before the first batch reads the schema, which the fake answers.
	s.setPingFail(func() error { return errDown })
	d := &fakeDLQ{}
	r := startFake(t, c, s, d)

	require.Eventually(t, func() bool { return r.ready.Check() != nil && r.logs.count("unavailable") > 0 }, 10*time.Second, 5*time.Millisecond)
	s.setPingFail(nil)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		require.Error(t, r.ready.Check(), "ready while writes fail")
	}
	s.setFail(nil)
	require.Eventually(t, func() bool { return s.routes() == 30 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return r.ready.Check() == nil }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, d.n.Load())
	for id, n := range s.written {
		require.Equal(t, 1, n, id)
	}
}

// Batches stop filling at Config.BatchBytes.
func TestFakeBatchBytes(t *testing.T) {
	t.Parallel()
	vs := values(t, 30)
	c := newFakeConsumer(0)
	c.add(0, vs...)
	s := newFakeStore()
	limit := 3*len(vs[0]) + 20
	startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) {
		cfg.BatchBytes = limit
		cfg.BatchMaxWait = time.Second // so that only the byte limit dispatches early
	})
	require.Eventually(t, func() bool { return s.routes() == 30 }, 10*time.Second, 10*time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range s.batches {
		require.LessOrEqual(t, b, limit, "batch %d: %d records", i, s.counts[i])
	}
	require.Contains(t, s.counts, 3, "full batches of 3")
}

// A span that keeps failing as "unavailable" while the database answers
// pings is split until its parts go through.
func TestFakeSplitSpanTheDatabaseKeepsFailing(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 40)...)
	s := newFakeStore()
	s.setFail(func(recs []passport.Accepted) error {
		if len(recs) > 4 {
			return errors.New("message too large (fake)")
		}
		return nil
	})
	r := startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) { cfg.BatchSize = 40; cfg.BatchMaxWait = time.Second })
	require.Eventually(t, func() bool { return s.routes() == 40 }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return r.ready.Check() == nil }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return c.committedAt(0) == 40 }, 10*time.Second, 10*time.Millisecond)
}

// Failures of a span while the database is down are the outage's, not the
// span's: they do not count toward splitting it. At a failover the write
// fails while the primary is gone, and once more as the promoted standby
// starts answering; the span goes through whole, and nothing says the
// database "keeps failing a write". (It did, and split the span, when every
// failure in a row counted as soon as a ping succeeded.)
func TestFakeOutageFailuresDoNotSplitASpan(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 10)...)
	s := newFakeStore()
	var down, comeBack atomic.Bool
	down.Store(true)
	var whileDown, afterUp atomic.Int32
	errDown := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	// Pings fail while it is down. The probe before the first batch reads
	// the schema (the fake's answers), so consumption starts; a free
	// first ping answer here once went to the writer, which then took the
	// database for one that answers and split the span.
	s.setPingFail(func() error {
		if down.Load() {
			return errDown
		}
		return nil
	})
	s.setFail(func([]passport.Accepted) error {
		if comeBack.Load() {
			// The database comes back as a write starts, never between a
			// write that failed on the outage and the probe after it: a
			// probe that answered there would rightly count that failure
			// against the span, and the test would see two (1 run in 600
			// of the test alone, four at a time).
			down.Store(false)
		}
		if down.Load() {
			whileDown.Add(1)
			return errDown
		}
		if afterUp.Add(1) == 1 {
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}
		return nil
	})
	r := startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) { cfg.BatchSize = 10 })
	require.Eventually(t, func() bool { return whileDown.Load() >= 3 }, 10*time.Second, 5*time.Millisecond)
	comeBack.Store(true)
	require.Eventually(t, func() bool { return s.routes() == 10 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return c.committedAt(0) == 10 }, 10*time.Second, 10*time.Millisecond)
	s.mu.Lock()
	counts := append([]int(nil), s.counts...)
	s.mu.Unlock()
	require.GreaterOrEqual(t, afterUp.Load(), int32(2), "a write failed after the database came back")
	require.Equal(t, []int{10}, counts, "the span is written whole")
	require.Zero(t, r.logs.count("splitting"))
}

// A write that keeps losing races with concurrent transactions (40001,
// beyond what store.Write runs again) is retried whole: consumption never
// pauses (ready throughout), the span is not split, nothing is
// dead-lettered. It counted as an outage before.
func TestFakeConflictsAreNotAnOutage(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	var conflicts atomic.Int32
	s.setFail(func([]passport.Accepted) error {
		if conflicts.Add(1) <= 4 {
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"}
		}
		return nil
	})
	d := &fakeDLQ{}
	r := startFake(t, c, s, d, func(cfg *ingest.Config) { cfg.BatchSize = 10 })
	require.Eventually(t, func() bool { return r.ready.Check() == nil }, 10*time.Second, 5*time.Millisecond)
	c.add(0, values(t, 10)...)
	for deadline := time.Now().Add(20 * time.Second); !(s.routes() == 10 && c.committedAt(0) == 10); time.Sleep(time.Millisecond) {
		require.NoError(t, r.ready.Check(), "not ready while writes lose races")
		require.True(t, time.Now().Before(deadline), "not written and committed within 20s")
	}
	s.mu.Lock()
	counts := append([]int(nil), s.counts...)
	s.mu.Unlock()
	require.Equal(t, []int{10}, counts, "the span is written whole")
	require.GreaterOrEqual(t, conflicts.Load(), int32(5))
	require.Zero(t, d.n.Load())
	require.Zero(t, r.logs.count("unavailable"))
	require.Equal(t, 3, r.logs.count("lost a race"), "one line per race lost after the fast attempt")
}

// Writes of more than 10 records run out of the server's statement_timeout
// (SQLSTATE 57014) while the database answers. The first burst splits its
// batch down to parts that fit, two timeouts at each size; the next batches
// are capped at what fitted (batchcap.go), so a second burst times out at
// most once on its way back up (two warnings, four with the batch in
// flight beside it). /readyz stays 200 throughout. Without the cap the
// second burst split the same way as the first.
func TestFakeBatchesShrinkToFitTheBound(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	s.setFail(func(recs []passport.Accepted) error {
		if len(recs) > 10 {
			return fmt.Errorf("write %d passports: %w", len(recs), &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})
		}
		return nil
	})
	r := startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) { cfg.BatchSize = 100 })
	require.Eventually(t, func() bool { return r.ready.Check() == nil }, 10*time.Second, 5*time.Millisecond)
	timeouts := func() int { return r.logs.count("ran out of its time bound") }
	var per [2]int
	for round := range per {
		before := timeouts()
		c.add(0, values(t, 100)...)
		want := 100 * (round + 1)
		for deadline := time.Now().Add(20 * time.Second); !(s.routes() == want && c.committedAt(0) == int64(want)); time.Sleep(time.Millisecond) {
			require.NoError(t, r.ready.Check(), "not ready while writes outrun the bound")
			require.True(t, time.Now().Before(deadline), "burst %d not written and committed within 20s", round+1)
		}
		per[round] = timeouts() - before
	}
	t.Logf("figures: writes out of their bound: %d in the first burst of 100, %d in the second", per[0], per[1])
	require.GreaterOrEqual(t, per[0], 10, "the first burst split down from 100")
	require.LessOrEqual(t, per[1], 4, "the second burst, capped, overshoots at most once")
	require.Equal(t, 1, r.logs.count("smaller batches"), "the cap is announced once")
	require.Zero(t, r.logs.count("unavailable"))
}

// A failing offset commit is retried with backoff, not on every loop pass,
// and logged once.
func TestFakeFailingCommitBacksOff(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 10)...)
	errCoord := errors.New("coordinator not available (fake)")
	c.commitErr.Store(&errCoord)
	s := newFakeStore()
	r := startFake(t, c, s, &fakeDLQ{})
	require.Eventually(t, func() bool { return s.routes() == 10 && c.commitCalls.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	calls := c.commitCalls.Load()
	require.LessOrEqual(t, calls, int32(4), "commit attempts within ~1.5s of failures")
	require.Equal(t, 1, r.logs.count("offset commit failed"))

	c.commitErr.Store(nil)
	require.Eventually(t, func() bool { return c.committedAt(0) == 10 }, 15*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return r.logs.count("offset commits succeed again") == 1 }, 5*time.Second, 10*time.Millisecond)
}

// With CommitInterval set, a stream of small batches is committed at most
// once per interval, and the last offsets go once the interval has passed,
// without another record to wake the loop.
func TestFakeCommitInterval(t *testing.T) {
	t.Parallel()
	const interval = 300 * time.Millisecond
	c := newFakeConsumer(0)
	s := newFakeStore()
	startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) { cfg.CommitInterval = interval })
	start := time.Now()
	for i, v := range values(t, 30) {
		c.add(0, v)
		// One batch per record: each is written before the next arrives.
		require.Eventually(t, func() bool { return s.routes() == i+1 }, 5*time.Second, time.Millisecond)
	}
	written := time.Since(start)
	require.Eventually(t, func() bool { return c.committedAt(0) == 30 }, 5*time.Second, time.Millisecond)
	took := time.Since(start)
	calls := int(c.commitCalls.Load())
	t.Logf("figures: 30 batches written in %s, all committed after %s, %d commits", written, took, calls)
	require.LessOrEqual(t, calls, int(took/interval)+2, "at most one commit per interval")
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Len(t, s.counts, 30, "one batch per record: a commit per batch would have been 30")
}

// A commit that hangs stalls neither the poll loop nor the shutdown.
func TestFakeHangingCommit(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 10)...)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	c.mu.Lock()
	c.commitGate = gate
	c.mu.Unlock()
	s := newFakeStore()
	r := startFake(t, c, s, &fakeDLQ{})
	require.Eventually(t, func() bool { return s.routes() == 10 && c.commitCalls.Load() > 0 }, 10*time.Second, 10*time.Millisecond)

	c.add(0, values(t, 10)...)
	require.Eventually(t, func() bool { return s.routes() == 20 }, 10*time.Second, 10*time.Millisecond, "polling goes on while a commit hangs")
	err, took := r.stop(t)
	require.NoError(t, err)
	require.Less(t, took, 5*time.Second, "shutdown bounded")
	require.Equal(t, int32(1), c.commitCalls.Load(), "no second commit while one runs")
}

// Natural batching (BatchMaxWait 0, the default): a free slot takes all
// that has arrived at once, so what arrived together is written together,
// and a lone record is written without waiting.
func TestFakeNaturalBatching(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	c.add(0, values(t, 120)...) // arrived before the start: one batch
	s := newFakeStore()
	startFake(t, c, s, &fakeDLQ{})
	require.Eventually(t, func() bool { return s.routes() == 120 }, 5*time.Second, time.Millisecond)
	s.mu.Lock()
	counts := append([]int(nil), s.counts...)
	s.mu.Unlock()
	require.Equal(t, []int{120}, counts, "what had arrived went in one batch")
	require.Eventually(t, func() bool { return c.committedAt(0) == 120 }, 5*time.Second, time.Millisecond)

	// Idle: one record goes at once (the fake polls with the timeout the
	// ingestor asks for, so a fixed wait would show here).
	start := time.Now()
	c.add(0, values(t, 1)...)
	require.Eventually(t, func() bool { return s.routes() == 121 }, 5*time.Second, time.Millisecond)
	require.Less(t, time.Since(start), 500*time.Millisecond, "a lone record does not wait for company")
}

// While the newest batch in flight runs its statements, the next batch
// waits, even with a slot free, and takes everything that arrived
// meanwhile: at a steady trickle a pipeline slot does not carry one record
// per transaction. A batch runs its statements apart from its commit when
// it shares a route with the write ahead of it: it waits until that write
// holds its rows, and commits after it.
func TestFakeNaturalBatchingWaitsForTheWriteAhead(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	startFake(t, c, s, &fakeDLQ{})
	calls, release := holdWrites(t, s, 2)
	route := uuid.NewString()
	c.add(0, passportValue(t, route, "route a"))
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	c.add(0, passportValue(t, route, "route a, amended"))
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, int32(1), calls.Load(), "the same route's next batch waits until the write ahead holds its rows")
	release(1) // the first batch commits: a slot is free
	require.Eventually(t, func() bool { return calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return s.routes() == 1 }, 5*time.Second, time.Millisecond)
	for _, v := range values(t, 5) {
		c.add(0, v)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, int32(2), calls.Load(), "no third write while the second runs its statements, though a slot is free")
	release(2)
	// The batch of five shares no route with the amended record's, so it
	// need not commit after it: wait for all three commits, in any order.
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.counts) == 3
	}, 5*time.Second, time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, 1, s.counts[0], "the first lone record")
	require.ElementsMatch(t, []int{1, 5}, s.counts[1:], "the amended record alone, then all that arrived behind it in one batch")
	require.Equal(t, 2, s.written[route])
	require.Len(t, s.written, 6)
}

// A batch that is not full waits for the write ahead of it to commit,
// though a slot is free and the two share no route (at a steady rate
// that makes fewer, larger transactions), but not for long: a write that
// takes longer waits for something, and the batch behind it is then
// written beside it. Sharing no route, it does not commit after it: it
// is written in one round trip of its own. Batches still report in
// order, so the slot it frees waits for the write ahead too (a third
// batch could otherwise share a route with that unfinished write
// unseen), and the offsets are committed only up to the first
// unfinished record.
func TestFakeBatchWaitsForTheCommitAheadForAWhile(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	startFake(t, c, s, &fakeDLQ{})
	calls, release := holdWrites(t, s, 1)
	c.add(0, values(t, 1)...)
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	c.add(0, values(t, 1)...)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, int32(1), calls.Load(), "the second batch waits for the first to commit")
	require.Eventually(t, func() bool { return s.routes() == 1 }, 5*time.Second, time.Millisecond,
		"the second batch committed while the first still writes, once the first took long")
	c.add(0, values(t, 1)...)
	time.Sleep(150 * time.Millisecond) // beyond the commit interval
	require.Equal(t, int32(2), calls.Load(), "no third batch before the first is done")
	require.Equal(t, int64(0), c.committedAt(0), "no offset committed past the unfinished first record")
	release(1)
	require.Eventually(t, func() bool { return s.routes() == 3 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return c.committedAt(0) == 3 }, 5*time.Second, time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, []int{1, 1, 1}, s.counts)
}

// Records that arrive while both pipeline slots are busy are parsed while
// they wait, not when their batch goes: a batch's turn does not include its
// records' parse time.
func TestFakeParsedWhileTheBatchAheadWrites(t *testing.T) {
	t.Parallel()
	_, s, r, calls, release := fiveBehindTwoHeldBatches(t)
	require.Equal(t, int32(2), calls.Load(), "their batch has not gone yet")
	release(1)
	release(2)
	require.Eventually(t, func() bool { return s.routes() == 7 }, 5*time.Second, time.Millisecond)
	require.Equal(t, uint64(7), r.stageCount(t, "parsed"), "each record parsed once")
}

// While records wait for a batch slot, the loop waits for the slot in Go
// and polls the client only without blocking: a Poll blocked in cgo keeps
// the Go runtime's monitor thread waking every 20 µs.
func TestFakeWaitsForASlotWithoutBlockingInPoll(t *testing.T) {
	t.Parallel()
	c, s, _, _, release := fiveBehindTwoHeldBatches(t)
	before := c.blockingPolls.Load()
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, before, c.blockingPolls.Load(), "Poll was allowed to block while both slots were busy and five records waited")
	release(1)
	release(2)
	require.Eventually(t, func() bool { return s.routes() == 7 }, 5*time.Second, time.Millisecond,
		"the waiting records go once a slot frees")
}

// fiveBehindTwoHeldBatches starts an ingestor whose first two batches (one
// record each) hold both pipeline slots, writing until released, and
// returns once five more records that arrived behind them are parsed.
func fiveBehindTwoHeldBatches(t *testing.T) (*fakeConsumer, *fakeStore, *fakeRun, *atomic.Int32, func(int)) {
	t.Helper()
	c := newFakeConsumer(0)
	s := newFakeStore()
	r := startFake(t, c, s, &fakeDLQ{})
	calls, release := holdWrites(t, s, 2)
	c.add(0, values(t, 1)...)
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	c.add(0, values(t, 1)...)
	require.Eventually(t, func() bool { return calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	c.add(0, values(t, 5)...)
	require.Eventually(t, func() bool { return r.stageCount(t, "parsed") == 7 }, 5*time.Second, time.Millisecond,
		"the five records behind the held batches are parsed before a slot frees")
	return c, s, r, calls, release
}

// stageCount is the sample count of one stage of the stage histogram.
func (r *fakeRun) stageCount(t *testing.T, stage string) uint64 {
	t.Helper()
	counts, _ := stageSamples(t, r.reg)
	return counts[stage]
}

// A batch that waits (BatchMaxWait > 0) still goes after BatchMaxWait
// while records keep arriving.
func TestFakeBatchMaxWait(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	// Long beside a parse: the loop parses a record before polling the
	// next (up to ~100 ms under -race on a loaded machine).
	startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) { cfg.BatchMaxWait = time.Second })
	c.add(0, values(t, 3)...)
	require.Eventually(t, func() bool { return s.routes() == 3 }, 5*time.Second, time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, []int{3}, s.counts, "the batch waited and took all three")
}

// The "kafka" readiness component follows the brokers' answers to the
// metadata probe, with one log line per change of state: not ready before
// the first answer, not ready (the probe's error named) while they do not
// answer, ready again when they do, and records keep flowing throughout
// (the consumer rides out outages by itself).
func TestFakeBrokersReadiness(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	unreachable := errors.New("kafka metadata: Local: Broker transport failure (fake)")
	c.probeErr.Store(&unreachable)
	s := newFakeStore()
	r := startFake(t, c, s, &fakeDLQ{})

	kafkaReason := func() string {
		err := r.ready.Check()
		if err == nil {
			return ""
		}
		return err.Error()
	}
	require.Eventually(t, func() bool {
		return strings.Contains(kafkaReason(), "kafka: brokers unreachable: kafka metadata: Local: Broker transport failure")
	}, 5*time.Second, 5*time.Millisecond, "readiness: %s", kafkaReason())
	time.Sleep(2500 * time.Millisecond) // two more failed probes
	require.Equal(t, 1, r.logs.count("kafka unreachable; records wait in the topic"), "one line per change of state")

	c.add(0, values(t, 3)...)
	require.Eventually(t, func() bool { return s.routes() == 3 }, 5*time.Second, 5*time.Millisecond, "records flow while the probe fails")

	c.probeErr.Store(nil)
	require.Eventually(t, func() bool { return r.ready.Check() == nil }, 5*time.Second, 5*time.Millisecond, "readiness: %s", kafkaReason())
	require.Equal(t, 1, r.logs.count("kafka reachable"))

	c.probeErr.Store(&unreachable)
	require.Eventually(t, func() bool { return strings.Contains(kafkaReason(), "kafka: brokers unreachable") }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 2, r.logs.count("kafka unreachable; records wait in the topic"))
}

// Records over PauseBytes (but not PauseRecords) pause consumption until
// the backlog is down to half of them. Resumption looked at the record
// count alone, so with large records the partitions were paused and
// resumed on alternate passes of the loop, and the backlog grew past
// PauseBytes for as long as the writes were slow.
func TestFakePauseBytesHoldsUntilDrained(t *testing.T) {
	t.Parallel()
	vs := values(t, 200)
	c := newFakeConsumer(0)
	s := newFakeStore()
	pauseBytes := 10 * len(vs[0])
	startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) {
		cfg.PauseBytes = pauseBytes
		cfg.BatchBytes = 2 * len(vs[0]) // two records a batch: the two slots hold four
	})
	calls, release := holdWrites(t, s, 2)
	// Only now: a batch written before the writes were held would free its
	// slot, and more than the bound below would be fetched (a CI run
	// fetched 16).
	c.add(0, vs...)
	require.Eventually(t, func() bool { return calls.Load() == 2 && c.isPaused(0) }, 10*time.Second, time.Millisecond,
		"both slots held and the partition paused")

	// While both writes are held nothing drains: the partition must stay
	// paused, with what was fetched bounded by PauseBytes.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.True(t, c.isPaused(0), "resumed while the backlog is still over PauseBytes")
		time.Sleep(time.Millisecond)
	}
	c.mu.Lock()
	fetched := c.pos[0]
	c.mu.Unlock()
	require.LessOrEqual(t, fetched, int64(4+10+1), "fetched: the four records in the held batches, PauseBytes of backlog, one more")

	release(1)
	release(2)
	require.Eventually(t, func() bool { return s.routes() == 200 }, 10*time.Second, 10*time.Millisecond)
	require.False(t, c.isPaused(0), "resumed once drained")
}

// With INGEST_BATCH_MAX_WAIT set, a record that waited longer than it (for
// a slot) goes with the next free slot, even when the batch before took
// only part of the backlog: the wait was counted again from each dispatch,
// so records a full batch left behind waited a whole BatchMaxWait more.
func TestFakeBatchMaxWaitCountsFromFetch(t *testing.T) {
	t.Parallel()
	const maxWait = 2 * time.Second
	vs := values(t, 7)
	c := newFakeConsumer(0)
	s := newFakeStore()
	startFake(t, c, s, &fakeDLQ{}, func(cfg *ingest.Config) {
		cfg.BatchSize = 2
		cfg.BatchMaxWait = maxWait
	})
	calls, release := holdWrites(t, s, 2)
	c.add(0, vs[:4]...) // two full batches: both slots held
	require.Eventually(t, func() bool { return calls.Load() == 2 }, 10*time.Second, time.Millisecond)
	c.add(0, vs[4:]...) // a full batch and one record left behind
	time.Sleep(maxWait + 200*time.Millisecond)

	released := time.Now()
	release(1)
	release(2)
	require.Eventually(t, func() bool { return s.routes() == 7 }, 10*time.Second, time.Millisecond)
	took := time.Since(released)
	require.Less(t, took, maxWait/2, "the record left behind had waited its BatchMaxWait already; it went %s after the slots freed", took)
}

// A Poll that fails (fatal for the client) stops Run with its error, but
// only after the batches in flight have been written and their offsets
// committed: nothing written is redelivered for want of a commit.
func TestFakeAFailedPollFinishesWhatIsInFlight(t *testing.T) {
	t.Parallel()
	c := newFakeConsumer(0)
	s := newFakeStore()
	writing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var started atomic.Int32 // records of the writes begun
	s.setFail(func(recs []passport.Accepted) error {
		started.Add(int32(len(recs)))
		once.Do(func() { close(writing) })
		<-release
		return nil
	})
	r := startFake(t, c, s, &fakeDLQ{})
	c.add(0, values(t, 3)...)
	select {
	case <-writing:
	case <-time.After(10 * time.Second):
		t.Fatal("no write started")
	}
	fatal := errors.New("kafka consumer: assign partitions [1] of in in a rebalance: refused (fake)")
	c.pollErr.Store(&fatal)
	time.Sleep(50 * time.Millisecond) // polls fail while the write waits
	close(release)
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		require.ErrorIs(t, err, fatal)
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on after Poll failed")
	}
	s.mu.Lock()
	written := len(s.written)
	s.mu.Unlock()
	require.EqualValues(t, started.Load(), written, "a write in flight was not finished")
	require.EqualValues(t, written, c.committedAt(0), "the finished writes' offsets were not committed")
}
