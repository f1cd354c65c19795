package main

import (
	"bytes"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/passportgen"
)

// hist is a latency histogram with 2 % wide logarithmic buckets from 0.1 ms,
// so that windows merge exactly (percentiles of a minute or of minutes 2–5
// are taken over every record of those windows, not averaged).
type hist struct {
	counts []int64
	n      int64
}

const (
	histBase   = 0.1 // ms, the upper bound of bucket 0
	histGrowth = 1.02
	histSize   = 1200 // up to about 2 hours
)

func newHist() *hist { return &hist{counts: make([]int64, histSize)} }

func (h *hist) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	i := 0
	if ms > histBase {
		i = int(math.Ceil(math.Log(ms/histBase) / math.Log(histGrowth)))
	}
	h.counts[min(i, histSize-1)]++
	h.n++
}

func (h *hist) merge(o *hist) {
	if o == nil {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the upper bound of the bucket holding quantile q, in ms
// (NaN when empty).
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return histBase * math.Pow(histGrowth, float64(i))
		}
	}
	return histBase * math.Pow(histGrowth, histSize-1)
}

// load produces passports at a constant rate and consumes both output
// topics; each output's latency goes into the histogram of the window it
// arrived in.
type load struct {
	clock windowClock

	mu       sync.Mutex
	inflight map[string]*sent // routeId → send time; removed at its second output
	windows  map[int]*hist

	produced    atomic.Int64 // acknowledged by the broker
	produceErrs atomic.Int64
	outputs     atomic.Int64
	duplicates  atomic.Int64 // outputs of a passport whose two outputs had arrived
	stopped     atomic.Bool
}

type sent struct {
	at   time.Time
	seen int
}

// windowClock maps an instant to the sample window it falls in, so that
// the load's latencies and the broker probe's acknowledgements land in the
// same windows as the sampler's readings.
type windowClock struct {
	start time.Time
	step  time.Duration
}

func (c windowClock) window(t time.Time) int { return int(t.Sub(c.start) / c.step) }

func newLoad(clock windowClock) *load {
	return &load{clock: clock, inflight: map[string]*sent{}, windows: map[int]*hist{}}
}

// produce sends passports at rate per second until ctx ends. Records are
// generated ahead by a goroutine of their own; pacing is in 5 ms steps.
func (l *load) produce(ctx context.Context, cl *kgo.Client, rate int, seed uint64) {
	recs := make(chan passportgen.Record, 4*rate)
	go func() {
		defer close(recs)
		rng := passportgen.NewRand(seed)
		for ctx.Err() == nil {
			select {
			case recs <- passportgen.Valid(rng):
			case <-ctx.Done():
			}
		}
	}()
	begin := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var n int64
	for {
		select {
		case <-ctx.Done():
			l.stopped.Store(true)
			return
		case now := <-tick.C:
			due := int64(now.Sub(begin).Seconds() * float64(rate))
			for ; n < due; n++ {
				var r passportgen.Record
				select {
				case r = <-recs:
				case <-ctx.Done():
					l.stopped.Store(true)
					return
				}
				l.mu.Lock()
				l.inflight[r.RouteID] = &sent{at: time.Now()}
				l.mu.Unlock()
				// Not ctx: a record handed over when the run ends is still
				// delivered, not aborted and counted as missing.
				id := r.RouteID
				cl.Produce(context.Background(), &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil {
						l.produceErrs.Add(1)
						l.mu.Lock()
						delete(l.inflight, id)
						l.mu.Unlock()
						return
					}
					l.produced.Add(1)
				})
			}
		}
	}
}

// routeIDKey finds data.routeId in an output record. The payload is
// PostgreSQL's jsonb text (`"routeId": "…"`, keys reordered), not the
// ingestor's encoding, so the value is found after the key, not by a fixed
// prefix.
var routeIDKey = []byte(`"routeId"`)

func routeIDOf(v []byte) (string, bool) {
	i := bytes.Index(v, routeIDKey)
	if i < 0 {
		return "", false
	}
	rest := v[i+len(routeIDKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || len(rest) < j+1+36 {
		return "", false
	}
	return string(rest[j+1 : j+1+36]), true
}

// consume reads both output topics until ctx ends.
func (l *load) consume(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		w := l.clock.window(now)
		fs.EachRecord(func(kr *kgo.Record) {
			id, ok := routeIDOf(kr.Value)
			if !ok {
				return
			}
			l.outputs.Add(1)
			l.mu.Lock()
			defer l.mu.Unlock()
			s, found := l.inflight[id]
			if !found {
				l.duplicates.Add(1)
				return
			}
			h := l.windows[w]
			if h == nil {
				h = newHist()
				l.windows[w] = h
			}
			h.add(now.Sub(s.at))
			if s.seen++; s.seen >= 2 {
				delete(l.inflight, id)
			}
		})
	}
}

// window returns a copy of window w's histogram (empty when none arrived).
func (l *load) window(w int) *hist {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := newHist()
	h.merge(l.windows[w])
	return h
}

// missing counts the passports sent whose two outputs have not both
// arrived, and the outputs missing.
func (l *load) missing() (passports, outputs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.inflight {
		outputs += 2 - s.seen
	}
	return len(l.inflight), outputs
}
