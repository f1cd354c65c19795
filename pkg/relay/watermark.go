package relay

import (
	"context"
	"errors"
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
// the margin (an ingest stalled on a slow database), a row written by hand
// with an old next_attempt_at, or a row whose PUBLISHED mark a failover
// lost. For those, every ClaimFullScanInterval W is recomputed from the
// start of the index (one index scan that stops at the first live entry,
// no locks), which lowers it to such a row: while rescans succeed no row
// waits longer than that interval beyond its commit (during a hold that
// makes them run out of their bound, until one succeeds), so the margin is
// a performance setting, not a correctness one. After a database failure the next full rescan comes
// right after the first good claim (rescanSoon). Between full rescans W only
// moves up, recomputed from W itself once per watermarkAdvance (cheap: it
// reads only the entries above W). Under a held snapshot a bounded claim
// then reads the entries of the last margin + watermarkAdvance seconds
// instead of those of the whole hold, and the full rescan reads the whole
// hold once per interval (or per 9× its own duration, whichever is longer,
// so that it never takes more than a tenth of one backend).
//
// The refresh runs before each claim that finds it due, outside the
// claim's bound (Relay.refreshWatermark). Until 2026-12-07 it ran inside
// the claim, on the claim's bound (20 s by default): a hold that made the
// full rescan longer than that (about 25 minutes at 1,000 events/s, by the
// 0.6 s per 45 s of docs/capacity.md) failed the claim that ran it, and
// the next claim ran it again, so one worker published nothing until the
// hold ended, and a relay started during it, nothing at all.
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
// watermark; every other method is the wrapped Outbox's. The relay
// refreshes W before each claim (Relay.refreshWatermark), outside the
// claim's own bound.
type watermarked struct {
	Outbox
	b       boundedOutbox
	margin  time.Duration
	every   time.Duration
	advance time.Duration

	refreshing sync.Mutex // one floor query at a time
	mu         sync.Mutex // guards the fields below
	w          time.Time  // zero: not known yet
	nextUp     time.Time  // local clock: the next advance
	nextAll    time.Time  // local clock: the next full rescan
	soonestAll time.Time  // local clock: nine times the last full rescan's duration after it
}

// withWatermark wraps o when the watermark is on and o supports it; it
// returns o and nil otherwise.
func withWatermark(o Outbox, cfg Config) (Outbox, *watermarked) {
	b, ok := o.(boundedOutbox)
	if !ok || cfg.ClaimFullScanInterval < 0 {
		return o, nil
	}
	m := &watermarked{Outbox: o, b: b, margin: cfg.ClaimWatermarkMargin, every: cfg.ClaimFullScanInterval, advance: watermarkAdvance}
	return m, m
}

// Claim claims from the watermark, or from the start of the index while no
// W is known (no refresh has succeeded yet): what a claim without the
// watermark does.
func (m *watermarked) Claim(ctx context.Context, limit int, maxBytes int64, lease time.Duration) ([]outbox.Row, bool, error) {
	m.mu.Lock()
	from := m.w
	m.mu.Unlock()
	return m.b.ClaimFrom(ctx, from, limit, maxBytes, lease)
}

// known reports whether a W is known.
func (m *watermarked) known() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.w.IsZero()
}

// due reports whether a refresh is due, and whether it is a full rescan:
// the first one, and then one every interval. An advance needs a W to
// read from.
func (m *watermarked) due() (due, full bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	full = !now.Before(m.nextAll)
	return full || (!m.w.IsZero() && !now.Before(m.nextUp)), full
}

// refresh recomputes W when due: from the start of the index (full) or
// from the current W. While another worker refreshes it the current W
// serves (it is still a valid bound); before the first W is known, workers
// wait for that refresh. ran reports whether this call read the floor.
//
// On an error the current W, if any, keeps serving, and the next refresh
// is scheduled as after a success: a full rescan that ran out of its bound
// under a long-held snapshot (it reads every index entry vacuum could not
// prune) is tried again only after nine times its duration, and claims go
// on from the known W meanwhile, or from the start of the index while none
// is known.
func (m *watermarked) refresh(ctx context.Context) (ran, full bool, err error) {
	for {
		due, full := m.due()
		if !due {
			return false, false, nil
		}
		if !m.refreshing.TryLock() {
			if m.known() {
				return false, false, nil
			}
			m.refreshing.Lock() // the first W is being read: wait for it
			m.refreshing.Unlock()
			if ctx.Err() != nil {
				return false, false, ctx.Err()
			}
			continue
		}
		err := m.recompute(ctx, full)
		m.refreshing.Unlock()
		return true, full, err
	}
}

// recompute reads a new W and schedules the next refresh.
func (m *watermarked) recompute(ctx context.Context, full bool) error {
	m.mu.Lock()
	from := m.w
	m.mu.Unlock()
	if full {
		from = time.Time{}
	}
	start := time.Now()
	floor, err := m.b.PendingFloor(ctx, from, m.margin)
	end := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if full {
		m.soonestAll = end.Add(9 * end.Sub(start))
		m.nextAll = end.Add(max(m.every, 9*end.Sub(start)))
	}
	m.nextUp = end.Add(m.advance)
	switch {
	case err != nil:
		return err
	case full:
		m.w = floor // may move down: a row committed below the old W
	case floor.After(m.w):
		m.w = floor
	}
	return nil
}

// rescanSoon brings the next full rescan forward to the soonest its own
// backoff allows (nine times the last one's duration after it); while
// claims fail it waits for one to succeed (refreshWatermark). The relay
// calls it on a database failure: a mark the old primary acknowledged may
// have been lost in a failover (the lease statements commit
// asynchronously), which puts its row back to PENDING with its old
// next_attempt_at, below W, where only a full rescan finds it.
func (m *watermarked) rescanSoon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Without a W claims read the whole index anyway, and the first
	// refresh waits for its interval after a failure (refreshWatermark).
	if !m.w.IsZero() && m.soonestAll.Before(m.nextAll) {
		m.nextAll = m.soonestAll
	}
}

// refreshWatermark refreshes the claim watermark when due, bounded by the
// lease (Config.LockTimeout) rather than by the claim's bound, and watched
// as a claim is (watchCall): a database that stops answering cuts it
// within seconds, one that answers slowly lets it run. A full rescan that
// runs out of its bound while the database answers is logged once, until
// one succeeds.
//
// While a claim has failed since the last good one (claimsHealthy), the
// claim is the relay's probe of the database, retried with a backoff: a
// W already known then serves unrefreshed, so that no refresh waits for
// its watch's verdict ahead of each probe on a link that hangs. Without
// a W (a relay started during an outage, or during a long hold) the
// refresh is tried, at most once per ClaimFullScanInterval after a
// failure (watermarked.due).
func (r *Relay) refreshWatermark(ctx context.Context) {
	if r.watermark == nil {
		return
	}
	if due, _ := r.watermark.due(); !due || (!r.claimsHealthy.Load() && r.watermark.known()) {
		return
	}
	c, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
	defer cancel()
	start := time.Now()
	stop := r.watchCall(ctx, "claim watermark", cancel)
	ran, full, err := r.watermark.refresh(c)
	answered := stop()
	switch {
	case !ran || !full:
	case err == nil:
		if r.watermarkSlow.Swap(false) {
			r.logger.InfoContext(ctx, "claim watermark's full rescan succeeded again", "took", time.Since(start).Round(time.Millisecond))
		}
	case answered && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		if !r.watermarkSlow.Swap(true) {
			r.logger.WarnContext(ctx, "claim watermark's full rescan of the PENDING index ran out of its time; claims go on from the last watermark, and a row written below it waits for a rescan that succeeds. A snapshot held open (pg_stat_activity: an old xact_start or backend_xmin) keeps vacuum from pruning the index",
				"took", time.Since(start).Round(time.Millisecond), "bound", r.cfg.LockTimeout)
		}
	}
}
