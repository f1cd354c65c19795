package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pcp/route-processing/pkg/outbox"
	"github.com/pcp/route-processing/pkg/record"
)

// queueOutbox hands out the rows put into it, BatchSize at a time, and
// counts the claims.
type queueOutbox struct {
	fakeOutbox
	mu     sync.Mutex
	due    []outbox.Row
	claims atomic.Int64
}

func (q *queueOutbox) put(rows []outbox.Row) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.due = append(q.due, rows...)
}

func (q *queueOutbox) Claim(_ context.Context, limit int, _ int64, _ time.Duration) ([]outbox.Row, bool, error) {
	q.claims.Add(1)
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(limit, len(q.due))
	rows := q.due[:n:n]
	q.due = q.due[n:]
	return rows, false, nil
}

func (q *queueOutbox) publishedCount() int {
	q.fakeOutbox.mu.Lock()
	defer q.fakeOutbox.mu.Unlock()
	return len(q.fakeOutbox.published)
}

// startQueueRelay runs a relay of workers over a queueOutbox whose
// publisher holds each batch for hold, and waits until the workers' first
// claims (at start) are over.
func startQueueRelay(t *testing.T, workers, batch int, hold time.Duration) (*Relay, *queueOutbox, *atomic.Int64) {
	t.Helper()
	q := &queueOutbox{}
	var inFlight, maxInFlight atomic.Int64
	pub := &fakePublisher{publish: func(_ context.Context, msgs []record.Record) []error {
		n := inFlight.Add(1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(hold)
		inFlight.Add(-1)
		return make([]error, len(msgs))
	}}
	r := newTestRelay(t, q, pub, Config{Workers: workers, BatchSize: batch, PollInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Every worker claims once when Kafka turns ready; then all sleep.
	require.Eventually(t, func() bool { return q.claims.Load() >= int64(workers) }, 5*time.Second, 5*time.Millisecond)
	for prev := int64(-1); prev != q.claims.Load(); {
		prev = q.claims.Load()
		time.Sleep(100 * time.Millisecond)
	}
	return r, q, &maxInFlight
}

// TestNotifyWakesOneWorker: a NOTIFY announces one transaction's rows; one
// worker claims them, the others sleep on (waking all of them made each
// of the others claim nothing).
func TestNotifyWakesOneWorker(t *testing.T) {
	t.Parallel()
	r, q, _ := startQueueRelay(t, 3, 100, 0)
	for i := 1; i <= 5; i++ {
		before := q.claims.Load()
		q.put(testRows(2))
		r.Notified()
		require.Eventually(t, func() bool { return q.publishedCount() == 2*i }, 5*time.Second, 5*time.Millisecond)
		time.Sleep(100 * time.Millisecond) // time for any other worker to claim
		require.Equal(t, int64(1), q.claims.Load()-before, "claims for notification %d", i)
	}
}

// TestBacklogWakesTheOtherWorkers: a worker whose claim fills a batch wakes
// another, so one NOTIFY in front of a backlog still gets every worker
// publishing.
func TestBacklogWakesTheOtherWorkers(t *testing.T) {
	t.Parallel()
	r, q, maxInFlight := startQueueRelay(t, 3, 10, 50*time.Millisecond)
	q.put(testRows(200))
	r.Notified()
	require.Eventually(t, func() bool { return q.publishedCount() == 200 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, int64(3), maxInFlight.Load(), "batches published at once")
}

// TestRowsFromBeforeTheListenerReconnectedAreNoMiss: a poll that finds rows
// created while the listener was disconnected (their notifications were
// lost: PostgreSQL restarted) does not conclude that notifications do not
// arrive; one that finds a row created since the reconnect, unannounced,
// does.
func TestRowsFromBeforeTheListenerReconnectedAreNoMiss(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t, &fakeOutbox{}, &fakePublisher{}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	prevClaim := time.Now()
	rows := testRows(1)
	created := prevClaim.Add(time.Millisecond) // after the last claim, while nobody listened
	time.Sleep(5 * time.Millisecond)
	r.Connected(ctx)
	claimed := time.Now()
	rows[0].AgeAtClaim = claimed.Sub(created)
	r.notePoll(ctx, prevClaim, claimed, rows)
	require.NotEqual(t, modePoll, r.wakeMode(), "rows from before the reconnect count as a miss")

	time.Sleep(5 * time.Millisecond)
	claimed = time.Now()
	rows[0].AgeAtClaim = time.Millisecond // created after the reconnect
	r.notePoll(ctx, prevClaim, claimed, rows)
	require.Eventually(t, func() bool { return r.wakeMode() == modePoll }, probeWait+2*time.Second, 10*time.Millisecond,
		"a row created after the reconnect, never announced, is a miss")
}

// TestNotificationJustAfterThePollIsNoMiss: a poll may see rows before
// their notification arrives (the ingestor notifies just after its
// commit); a notification within probeWait of the claim means LISTEN
// works, and the relay does not say it polls, not even for a moment.
func TestNotificationJustAfterThePollIsNoMiss(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t, &fakeOutbox{}, &fakePublisher{}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	prevClaim := time.Now()
	time.Sleep(5 * time.Millisecond)
	rows := testRows(1)
	rows[0].AgeAtClaim = time.Millisecond // created after the previous claim
	r.notePoll(ctx, prevClaim, time.Now(), rows)
	require.Equal(t, modeNotify, r.wakeMode(), "not yet: the notification may be on its way")
	time.Sleep(10 * time.Millisecond)
	r.Notified()
	time.Sleep(probeWait + time.Second)
	require.Equal(t, modeNotify, r.wakeMode(), "the notification came")
}
