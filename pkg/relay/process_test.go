package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

// fakeOutbox records what the relay asks of the outbox.
type fakeOutbox struct {
	mu        sync.Mutex
	published []outbox.Lease
	retried   []outbox.Retry
	released  []outbox.Lease
	postponed []outbox.Retry
}

func (f *fakeOutbox) Claim(context.Context, int, int64, time.Duration) ([]outbox.Row, bool, error) {
	return nil, false, nil
}

func (f *fakeOutbox) MarkPublished(_ context.Context, ls []outbox.Lease) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, ls...)
	return int64(len(ls)), nil
}

func (f *fakeOutbox) Retry(_ context.Context, rs []outbox.Retry, _ int) ([]outbox.RetryResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retried = append(f.retried, rs...)
	out := make([]outbox.RetryResult, len(rs))
	for i, r := range rs {
		out[i] = outbox.RetryResult{ID: r.ID, Status: outbox.StatusPending, Attempts: 1}
	}
	return out, nil
}

func (f *fakeOutbox) Release(_ context.Context, ls []outbox.Lease) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, ls...)
	return int64(len(ls)), nil
}

func (f *fakeOutbox) Postpone(_ context.Context, rs []outbox.Retry) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.postponed = append(f.postponed, rs...)
	return int64(len(rs)), nil
}

func (f *fakeOutbox) Control(context.Context) (outbox.Control, error) { return outbox.Control{}, nil }
func (f *fakeOutbox) Stuck(context.Context) error                     { return nil }

func (f *fakeOutbox) Pending(context.Context) (outbox.PendingSummary, error) {
	return outbox.PendingSummary{}, nil
}

func (f *fakeOutbox) TableHealth(context.Context) (outbox.TableHealth, error) {
	return outbox.TableHealth{}, nil
}

func (f *fakeOutbox) DeletePublished(_ context.Context, _ time.Duration, _ int, from time.Time) (int64, time.Time, error) {
	return 0, from, nil
}

// fakePublisher answers each ProduceBatch with publish(msgs) and each Probe
// with probe().
type fakePublisher struct {
	mu      sync.Mutex
	batches [][]record.Record
	probes  int
	publish func(ctx context.Context, msgs []record.Record) []error
	probe   func(ctx context.Context) error
}

func (p *fakePublisher) ProduceBatch(ctx context.Context, msgs []record.Record) []error {
	p.mu.Lock()
	p.batches = append(p.batches, msgs)
	p.mu.Unlock()
	return p.publish(ctx, msgs)
}

func (p *fakePublisher) Probe(ctx context.Context, _ string, _ time.Duration) error {
	p.mu.Lock()
	p.probes++
	p.mu.Unlock()
	if p.probe == nil {
		return nil
	}
	return p.probe(ctx)
}

func all(err error) func(context.Context, []record.Record) []error {
	return func(_ context.Context, msgs []record.Record) []error {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
}

func newTestRelay(t *testing.T, ob Outbox, pub Publisher, cfg Config) *Relay {
	t.Helper()
	r, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), ob, pub, cfg)
	require.NoError(t, err)
	return r
}

func testRows(n int) []outbox.Row {
	rows := make([]outbox.Row, n)
	token := uuid.New()
	for i := range rows {
		id := uuid.New()
		rows[i] = outbox.Row{ID: id, RouteID: uuid.New(), EventType: "E", Topic: "t", Key: "k",
			Payload: []byte(`{}`), Headers: []record.Header{{Key: "eventId", Value: []byte(id.String())}}, CreatedAt: time.Now(), Token: token}
	}
	return rows
}

// TestUnavailableWhileClusterAnswersCountsNoAttempt: a partition without a
// leader or without enough replicas fails messages with an unavailable-class
// error while another broker answers the probe. Nothing is charged: the rows
// are postponed with backoff and last_error, not retried with attempts + 1.
func TestUnavailableWhileClusterAnswersCountsNoAttempt(t *testing.T) {
	t.Parallel()
	ob := &fakeOutbox{}
	cause := errors.New("Local: record.Record timed out (after NOT_ENOUGH_REPLICAS)")
	pub := &fakePublisher{publish: all(errors.Join(record.ErrUnavailable, cause))}
	r := newTestRelay(t, ob, pub, Config{InitialBackoff: time.Second, MaxBackoff: time.Minute})
	rows := testRows(3)
	r.process(context.Background(), rows, time.Now(), time.Now(), trace.SpanContext{})

	require.Equal(t, 1, pub.probes, "the cluster was probed")
	require.Empty(t, ob.retried, "no attempt counted")
	require.Len(t, ob.postponed, 3)
	for _, p := range ob.postponed {
		require.Contains(t, p.Error, "NOT_ENOUGH_REPLICAS")
		require.GreaterOrEqual(t, p.Delay, time.Second)
	}
	require.False(t, r.kafkaDown.Load(), "a broker answers: no outage mode")
}

// TestStoppingSkipsTheProbe: when the relay is stopping, unavailable rows are
// given back at once; no probe (a metadata request that ignores cancellation)
// eats the shutdown budget.
func TestStoppingSkipsTheProbe(t *testing.T) {
	t.Parallel()
	ob := &fakeOutbox{}
	ctx, cancel := context.WithCancel(context.Background())
	pub := &fakePublisher{
		publish: func(_ context.Context, msgs []record.Record) []error {
			cancel() // SIGTERM while the batch waits for its reports
			return all(record.ErrUnavailable)(nil, msgs)
		},
		probe: func(context.Context) error {
			time.Sleep(5 * time.Second) // GetMetadata against a frozen broker
			return record.ErrUnavailable
		},
	}
	r := newTestRelay(t, ob, pub, Config{})
	start := time.Now()
	r.process(ctx, testRows(2), time.Now(), time.Now(), trace.SpanContext{})
	require.Less(t, time.Since(start), 2*time.Second)
	require.Zero(t, pub.probes)
	require.Len(t, ob.released, 2)
	require.Empty(t, ob.retried)
}

// TestStallProbeCutByTheBatchIsNoOutage: over a slow link a batch's
// reports may come while its stall probe still waits for an answer; the
// batch's end cuts the probe short, which says nothing of the cluster
// (it put the relay in outage mode, giving leases back, several times a
// minute over a link 2 s slow).
func TestStallProbeCutByTheBatchIsNoOutage(t *testing.T) {
	t.Parallel()
	ob := &fakeOutbox{}
	cfg := Config{PublishTimeout: 2 * time.Second, LockTimeout: 20 * time.Second}
	probed := make(chan struct{})
	pub := &fakePublisher{
		publish: func(_ context.Context, msgs []record.Record) []error {
			time.Sleep(cfg.WithDefaults().stallAfter() + 300*time.Millisecond) // reports come late, but come
			return make([]error, len(msgs))
		},
		probe: func(ctx context.Context) error {
			<-ctx.Done() // an answer slower than the batch
			return ctx.Err()
		},
	}
	r := newTestRelay(t, ob, pub, cfg)
	r.kafkaDown.Store(false)
	// The relay's own confirmation of the stall, to know when it is done.
	r.pub = probeDone{pub, probed}
	r.process(context.Background(), testRows(2), time.Now(), time.Now(), trace.SpanContext{})
	select {
	case <-probed:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled batch was not probed")
	}
	time.Sleep(50 * time.Millisecond) // confirmOutage's few statements after the probe
	require.False(t, r.kafkaDown.Load(), "a probe cut by the batch's end is no outage")
	require.Len(t, ob.published, 2)
}

// probeDone closes done when a probe returns.
type probeDone struct {
	*fakePublisher
	done chan struct{}
}

func (p probeDone) Probe(ctx context.Context, topic string, timeout time.Duration) error {
	defer close(p.done)
	return p.fakePublisher.Probe(ctx, topic, timeout)
}

// TestBadHeadersChargeOnlyTheirRow: a row whose headers did not decode is
// charged an attempt with the reason; its neighbours are published.
func TestBadHeadersChargeOnlyTheirRow(t *testing.T) {
	t.Parallel()
	ob := &fakeOutbox{}
	pub := &fakePublisher{publish: all(nil)}
	r := newTestRelay(t, ob, pub, Config{})
	rows := testRows(3)
	rows[1].Headers, rows[1].HeadersError = nil, "outbox row headers are not a JSON object of strings: boom"
	r.process(context.Background(), rows, time.Now(), time.Now(), trace.SpanContext{})

	require.Len(t, pub.batches, 1)
	require.Len(t, pub.batches[0], 2, "the bad row is not sent")
	require.ElementsMatch(t, []outbox.Lease{rows[0].Lease(), rows[2].Lease()}, ob.published)
	require.Len(t, ob.retried, 1)
	require.Equal(t, rows[1].ID, ob.retried[0].ID)
	require.Contains(t, ob.retried[0].Error, "headers are not a JSON object")
}

// TestIsolationEndsBeforeTheLease: the one-by-one re-send after message
// errors starts no send that could outlast the lease (a send may take
// PublishTimeout + the report margin, the marks need theirs).
func TestIsolationEndsBeforeTheLease(t *testing.T) {
	t.Parallel()
	ob := &fakeOutbox{}
	rejected := errors.New("Broker: record.Record size too large")
	pub := &fakePublisher{publish: func(_ context.Context, msgs []record.Record) []error {
		if len(msgs) == 1 {
			time.Sleep(200 * time.Millisecond) // a slow single send
		}
		return all(rejected)(nil, msgs)
	}}
	// The isolation window is LockTimeout − PublishTimeout − LeaseMargin =
	// 500ms: sends start at about 0, 200 and 400ms, and no more.
	r := newTestRelay(t, ob, pub, Config{PublishTimeout: time.Second, LockTimeout: time.Second + LeaseMargin + 500*time.Millisecond})
	r.process(context.Background(), testRows(8), time.Now(), time.Now(), trace.SpanContext{})

	singles := len(pub.batches) - 1
	require.Equal(t, 3, singles, "single sends started within the window")
	require.Len(t, ob.retried, 8, "every row charged (each failed alone or was not re-sent)")

	// The window counts from when the claim was sent, where the lease
	// began, not from when it returned: a claim that took 400 ms leaves
	// 100 ms, one single send.
	ob2 := &fakeOutbox{}
	pub2 := &fakePublisher{publish: pub.publish}
	r2 := newTestRelay(t, ob2, pub2, Config{PublishTimeout: time.Second, LockTimeout: time.Second + LeaseMargin + 500*time.Millisecond})
	r2.process(context.Background(), testRows(8), time.Now().Add(-400*time.Millisecond), time.Now(), trace.SpanContext{})
	require.Equal(t, 1, len(pub2.batches)-1, "single sends started within the lease's window")
	require.Len(t, ob2.retried, 8)
}

// A stop that comes while a batch the cluster refused is out charges none
// of its rows: they were not sent alone, and another claim re-sends them
// (alone, if the refusal repeats). Before, every row was charged an
// attempt, the innocent neighbours of one bad record too.
func TestIsolationGivesBackWhenStopping(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ob := &fakeOutbox{}
	rejected := errors.New("Broker: record.Record size too large")
	pub := &fakePublisher{publish: func(_ context.Context, msgs []record.Record) []error {
		cancel() // the stop arrives while the batch is out
		return all(rejected)(nil, msgs)
	}}
	r := newTestRelay(t, ob, pub, Config{})
	r.process(ctx, testRows(3), time.Now(), time.Now(), trace.SpanContext{})

	require.Len(t, pub.batches, 1, "no single sends once stopping")
	require.Empty(t, ob.retried, "no attempt charged")
	require.Len(t, ob.released, 3, "every row given back")
}

func TestValidateLeaseMargin(t *testing.T) {
	t.Parallel()
	require.Error(t, Config{PublishTimeout: 30 * time.Second, LockTimeout: 30 * time.Second}.Validate())
	require.NoError(t, Config{PublishTimeout: 30 * time.Second, LockTimeout: 40 * time.Second}.Validate())
	require.NoError(t, Config{PublishTimeout: 2 * time.Second, LockTimeout: 4 * time.Second}.Validate(),
		"a short lease is allowed: it risks duplicates, never losses")
	require.NoError(t, Config{}.Validate(), "the defaults (60s lease, 30s publish) fit")
	var fe *FieldError
	require.ErrorAs(t, Config{PublishTimeout: 30 * time.Second, LockTimeout: 30 * time.Second}.Validate(), &fe)
	require.Equal(t, "LockTimeout", fe.Field, "the field is named for callers that map it to their source")

	// A PUBLISHED mark may be sent again until its lease ends: its row
	// must still be there, or the relay reports a lost lease.
	require.ErrorAs(t, Config{Retention: 30 * time.Second}.Validate(), &fe)
	require.Equal(t, "Retention", fe.Field)
	require.NoError(t, Config{Retention: time.Minute}.Validate(), "as long as the default lease")
	require.NoError(t, Config{Retention: -1}.Validate(), "off")
}

func TestDefaultPublishTimeoutFollowsTheLease(t *testing.T) {
	t.Parallel()
	require.Equal(t, DefaultPublishTimeout, Config{}.WithDefaults().PublishTimeout)
	require.Equal(t, 15*time.Second, Config{LockTimeout: 25 * time.Second}.WithDefaults().PublishTimeout, "lease − LeaseMargin")
	require.Equal(t, 2*time.Second, Config{LockTimeout: 4 * time.Second}.WithDefaults().PublishTimeout, "half a short lease")
	require.Equal(t, 50*time.Second, Config{LockTimeout: 40 * time.Second, PublishTimeout: 50 * time.Second}.WithDefaults().PublishTimeout,
		"a set value is kept (and Validate rejects it)")
}

// failingMarks fails MarkPublished n times, then succeeds.
type failingMarks struct {
	fakeOutbox
	n atomic.Int32
}

func (f *failingMarks) MarkPublished(ctx context.Context, ls []outbox.Lease) (int64, error) {
	if f.n.Add(-1) >= 0 {
		return 0, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return f.fakeOutbox.MarkPublished(ctx, ls)
}

// TestRetryDBLogsOncePerFailure: a mark that fails while PostgreSQL is away
// is retried until it succeeds or the lease ends, with one warning for the
// failure and one line for the outcome, not one per retry (a retry comes
// every ProbeMaxBackoff: the log flooded during an outage).
func TestRetryDBLogsOncePerFailure(t *testing.T) {
	t.Parallel()
	ob := &failingMarks{}
	ob.n.Store(12)
	var logs bytes.Buffer
	r, err := New(slog.New(slog.NewTextHandler(&logs, nil)), ob, &fakePublisher{}, Config{ProbeMaxBackoff: 10 * time.Millisecond})
	require.NoError(t, err)
	leases := []outbox.Lease{{ID: uuid.New(), Token: uuid.New()}}
	r.retryDB(context.Background(), time.Now().Add(time.Minute), "mark published", func(ctx context.Context) error {
		_, err := ob.MarkPublished(ctx, leases)
		return err
	})
	require.Len(t, ob.published, 1, "marked once it succeeded")
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())
	require.Contains(t, logs.String(), "database write succeeded after retries")
	require.Contains(t, logs.String(), "retries=12")
}

// orphanOutbox is a fakeOutbox that records when the relay asks it to give
// back its cut claims.
type orphanOutbox struct {
	fakeOutbox
	released atomic.Int32
}

func (o *orphanOutbox) ReleaseOrphans(context.Context) { o.released.Add(1) }

// TestStopGivesBackCutClaims: after a stop, once its loops have returned,
// the relay has the outbox give back the claims the stop cut (no later
// claim will), once.
func TestStopGivesBackCutClaims(t *testing.T) {
	t.Parallel()
	ob := &orphanOutbox{}
	r := newTestRelay(t, ob, &fakePublisher{}, Config{PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	time.Sleep(200 * time.Millisecond)
	require.Zero(t, ob.released.Load(), "not while running")
	cancel()
	<-done
	require.Equal(t, int32(1), ob.released.Load())
}
