package backoff

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// MissError is a probe that got no answer within its wait (Patience.Run).
// The wait grows with a slow link's answers and with misses in a row, so it
// says why an outage took as long as it did to show.
type MissError struct {
	Wait time.Duration
	Err  error
}

func (e *MissError) Error() string {
	return fmt.Sprintf("no answer within %s: %v", e.Wait.Round(time.Millisecond), e.Err)
}

func (e *MissError) Unwrap() error { return e.Err }

// Patience is how long a probe waits for an answer: Min while answers come
// fast, four times the usual answer once that is more (the usual answer
// above Min/4), and twice as long after each probe in a row that got none,
// up to Max. A hung
// link to a cluster that answered fast is noticed within Min, as with a
// fixed timeout, while a link that is slow but working (every answer a
// second or two late) is not taken for a dead one after its first probe or
// two, which a fixed timeout below the link's round trip would do for good.
// It is safe for concurrent use.
type Patience struct {
	min, max time.Duration
	usual    atomic.Int64 // smoothed answer time, nanoseconds; 0 until the first
	misses   atomic.Int32 // probes in a row without an answer
}

// NewPatience returns a Patience between minD and maxD (maxD < minD is taken
// as minD).
func NewPatience(minD, maxD time.Duration) *Patience {
	return &Patience{min: minD, max: max(maxD, minD)}
}

// Wait is how long the next probe waits for its answer.
func (p *Patience) Wait() time.Duration {
	d := max(p.min, 4*time.Duration(p.usual.Load()))
	for i := int32(0); i < p.misses.Load() && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// Answered records a probe answered after took.
func (p *Patience) Answered(took time.Duration) {
	p.misses.Store(0)
	took = max(took, 1) // 0 means "no answer yet"
	for {
		old := p.usual.Load()
		next := int64(took)
		if old != 0 {
			next = old + (int64(took)-old)/4
		}
		if p.usual.CompareAndSwap(old, next) {
			return
		}
	}
}

// Missed records a probe that got no answer.
func (p *Patience) Missed() {
	if p.misses.Load() < 32 {
		p.misses.Add(1)
	}
}

// Forgive clears the misses; what the link's usual answer takes is kept.
func (p *Patience) Forgive() { p.misses.Store(0) }

// Worked records a call to the dependency (not a probe) that worked in
// took. An outage is over: its misses must not lengthen the next probe,
// and neither must a probe begun during it and answered after it (its
// answer took seconds; as the first answer it set the relay's usual one,
// and the next blackhole showed 3 s later than the first), so the usual
// answer is taken to be no slower than twice took: a probe is about two
// round trips (the pool's ping of an idle connection, and the query), a
// warm call one. On a slow link took is slow too, and the wait stays long.
func (p *Patience) Worked(took time.Duration) {
	p.misses.Store(0)
	bound := int64(max(2*took, 1))
	for {
		old := p.usual.Load()
		if old <= bound || p.usual.CompareAndSwap(old, bound) {
			return
		}
	}
}

// Run runs probe bounded by Wait and records how it went: a success counts
// its time, and a probe that failed after running (nearly) its whole wait
// is a miss, whatever ctx did meanwhile: a Kafka metadata request is
// bounded by a whole number of milliseconds no later than the deadline and
// runs it out in C even when ctx ends, so it returns its own timeout error
// just before or after the deadline, and a wait run out says the link is
// slow even if the caller stopped caring (a stalled batch whose reports
// came while its probe waited). An error sooner than the last twentieth of
// the wait (connection refused, a server's error, a probe its caller cut
// short) is no miss: it says nothing of how slow the link is. A miss costs
// no more than a longer next wait. A miss's error is a *MissError.
func (p *Patience) Run(ctx context.Context, probe func(context.Context) error) error {
	wait := p.Wait()
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	err := probe(pctx)
	took := time.Since(start)
	switch {
	case err == nil:
		p.Answered(took)
	case took >= wait-wait/20:
		p.Missed()
		return &MissError{Wait: wait, Err: err}
	}
	return err
}
