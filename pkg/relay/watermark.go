package relay

import (
	"context"
	"sync"
	"time"

	"github.com/pcp/route-processing/pkg/outbox"
)

// The claim watermark: why claims start their index scan at W.
//
// While a snapshot is held on the database (a REPEATABLE READ report, a
// forgotten psql session), vacuum cannot remove the PENDING index entries
// of rows already marked PUBLISHED, and a claim that scans the index from
// its start visits every one of them: measured at 1,000 events/s after 45 s
// of a hold, 527–704 ms and 8,252 buffers per claim (docs/capacity.md),
// growing with the hold. Claims bounded by next_attempt_at >= W, W just
// below the oldest live PENDING row, skip those entries.
//
// W is a lower bound on the next_attempt_at of every PENDING row, leased
// ones included, so a bounded claim finds exactly what an unbounded one
// would:
//   - released and expired leases keep their next_attempt_at, which W
//     already counted while they were leased;
//   - retries, postpones and requeues write now() (+ a delay) of a short
//     statement, above W;
//   - W stays ClaimWatermarkMargin below the database's now(), so rows of a
//     transaction that started less than the margin before W was computed
//     (an ingest batch: its next_attempt_at is its transaction's start) are
//     above W when they commit.
//
// What can still land below W is a row of a transaction open longer than
// the margin (an ingest stalled on a slow database) or written by hand with
// an old next_attempt_at. For those, every ClaimFullScanInterval W is
// recomputed from the start of the index (one index scan that stops at the
// first live entry, no locks), which lowers it to such a row: no row waits
// longer than that interval beyond its commit, so the margin is a
// performance setting, not a correctness one. Between full rescans W only
// moves up, recomputed from W itself once per watermarkAdvance (cheap: it
// reads only the entries above W). Under a held snapshot a bounded claim
// then reads the entries of the last margin + watermarkAdvance seconds
// instead of those of the whole hold, and the full rescan reads the whole
// hold once per interval (or per 9× its own duration, whichever is longer,
// so that it never takes more than a tenth of one backend).
//
// W lives in memory, one per relay process: its workers share it; other
// processes keep their own.

// boundedOutbox is what the watermark needs beyond Outbox; *store.Outbox
// implements it. An Outbox without it (the unit tests' fakes) is claimed
// without a bound, as before the watermark.
type boundedOutbox interface {
	// ClaimFrom is Claim restricted to rows whose next_attempt_at is at or
	// after from (zero: no bound).
	ClaimFrom(ctx context.Context, from time.Time, limit int, maxBytes int64, lease time.Duration) ([]outbox.Row, bool, error)
	// PendingFloor returns the lowest next_attempt_at of the PENDING rows
	// at or after from (zero: all), leased ones included, or the database's
	// now() − margin when lower.
	PendingFloor(ctx context.Context, from time.Time, margin time.Duration) (time.Time, error)
}

// watermarkAdvance is how often W is moved up between full rescans.
const watermarkAdvance = time.Second

// watermarked is an Outbox whose Claim is bounded by the process's
// watermark; every other method is the wrapped Outbox's.
type watermarked struct {
	Outbox
	b       boundedOutbox
	margin  time.Duration
	every   time.Duration
	advance time.Duration

	refresh sync.Mutex // one floor query at a time
	mu      sync.Mutex // guards the fields below
	w       time.Time  // zero: not known yet
	nextUp  time.Time  // local clock: the next advance
	nextAll time.Time  // local clock: the next full rescan
}

// withWatermark wraps o when the watermark is on and o supports it.
func withWatermark(o Outbox, cfg Config) Outbox {
	b, ok := o.(boundedOutbox)
	if !ok || cfg.ClaimFullScanInterval < 0 {
		return o
	}
	return &watermarked{Outbox: o, b: b, margin: cfg.ClaimWatermarkMargin, every: cfg.ClaimFullScanInterval, advance: watermarkAdvance}
}

// Claim claims from the watermark, refreshing it first when due.
func (m *watermarked) Claim(ctx context.Context, limit int, maxBytes int64, lease time.Duration) ([]outbox.Row, bool, error) {
	from, err := m.bound(ctx)
	if err != nil {
		return nil, false, err
	}
	return m.b.ClaimFrom(ctx, from, limit, maxBytes, lease)
}

// bound returns W, recomputing it first when a full rescan or an advance is
// due. While another worker recomputes it, the current W serves (it is
// still a valid bound); before the first W is known, workers wait for it.
func (m *watermarked) bound(ctx context.Context) (time.Time, error) {
	for {
		m.mu.Lock()
		w, now := m.w, time.Now()
		full := w.IsZero() || !now.Before(m.nextAll)
		due := full || !now.Before(m.nextUp)
		m.mu.Unlock()
		if !due {
			return w, nil
		}
		if !m.refresh.TryLock() {
			if !w.IsZero() {
				return w, nil
			}
			m.refresh.Lock() // the first W is being read: wait for it
			m.refresh.Unlock()
			continue
		}
		w, err := m.recompute(ctx, w, full)
		m.refresh.Unlock()
		return w, err
	}
}

// recompute reads a new W, from the start of the index (full) or from the
// current one, and schedules the next refresh. On an error the current W,
// if any, keeps serving and the refresh is tried again on the next claim.
func (m *watermarked) recompute(ctx context.Context, cur time.Time, full bool) (time.Time, error) {
	from := cur
	if full {
		from = time.Time{}
	}
	start := time.Now()
	floor, err := m.b.PendingFloor(ctx, from, m.margin)
	if err != nil {
		if cur.IsZero() {
			return time.Time{}, err
		}
		return cur, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	end := time.Now()
	if full {
		m.w = floor // may move down: a row committed below the old W
		m.nextAll = end.Add(max(m.every, 9*end.Sub(start)))
	} else if floor.After(m.w) {
		m.w = floor
	}
	m.nextUp = end.Add(m.advance)
	return m.w, nil
}
