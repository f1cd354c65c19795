package backoff

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

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
	old := p.usual.Load()
	if old == 0 {
		p.usual.Store(int64(took))
		return
	}
	p.usual.Store(old + (int64(took)-old)/4)
}

// Missed records a probe that got no answer.
func (p *Patience) Missed() {
	if p.misses.Load() < 32 {
		p.misses.Add(1)
	}
}

// Run runs probe bounded by Wait and records how it went: a success counts
// its time, running out of the wait is a miss, and an error before that
// (connection refused, a server's error) is neither: it says nothing of how
// slow the link is.
func (p *Patience) Run(ctx context.Context, probe func(context.Context) error) error {
	pctx, cancel := context.WithTimeout(ctx, p.Wait())
	defer cancel()
	start := time.Now()
	err := probe(pctx)
	switch {
	case err == nil:
		p.Answered(time.Since(start))
	case ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded):
		p.Missed()
	}
	return err
}
