package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/passportgen"
)

// stream is one latency measurement, shared by the e2e latency phase and
// the two-hop floor: an output consumer on outTopics starts first, then
// recs are produced to inTopic at rate with the send time of each noted;
// every output record that identify maps back to input i gives one
// latency, receive time − send time of i, and one last-hop figure,
// receive time − the output record's timestamp.
type stream struct {
	rate      int
	recs      []passportgen.Record
	inTopic   string
	outTopics []string
	perInput  int // output records per input record
	identify  func(*kgo.Record) (int, bool)
	// warmup is how many of the first records are not counted. The first
	// goes through alone and its outputs are awaited (the group joined,
	// every client connected); the others follow at rate just before the
	// counted ones, so that the clock starts on a system already in its
	// steady state at that rate (batch sizes, caches, table and WAL files
	// grown), as a service that has been running, not on a fresh one.
	warmup int
	// started runs once the consumer has joined, just before the first
	// record; stopped runs after the last output (or the wait's end).
	started, stopped func()
}

type streamed struct {
	lat, lastHop []time.Duration // sorted
	seen         int
	slowest      map[int]time.Duration // second of the run (by send time) → worst latency
}

func (b *bench) runStream(s stream) (streamed, error) {
	n := len(s.recs)
	sent := make([]time.Time, n)
	res := streamed{slowest: map[int]time.Duration{}}
	firstSeen := 0 // outputs of record 0
	cl, err := b.outputConsumer(s.outTopics...)
	if err != nil {
		return res, fmt.Errorf("output consumer: %w", err)
	}
	defer cl.Close()
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for {
			mu.Lock()
			done := res.seen >= s.perInput*n
			mu.Unlock()
			if done {
				return
			}
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(kr *kgo.Record) {
				i, ok := s.identify(kr)
				if !ok || i < 0 || i >= n {
					return
				}
				if i < s.warmup {
					if i == 0 {
						firstSeen++
					}
					res.seen++
					return
				}
				if st := sent[i]; !st.IsZero() {
					d := now.Sub(st)
					res.lat = append(res.lat, d)
					if !kr.Timestamp.IsZero() {
						res.lastHop = append(res.lastHop, now.Sub(kr.Timestamp))
					}
					sec := int(st.Sub(sent[s.warmup]) / time.Second)
					res.slowest[sec] = max(res.slowest[sec], d)
				}
				res.seen++
			})
			mu.Unlock()
		}
	}()
	// Let the consumer join its partitions before producing.
	time.Sleep(time.Second)

	prod := e2e.NewProducer(b.t, b.bootstrap, s.inTopic, inputProducerOpts()...)
	prod.Send(0, s.recs[0].Key, s.recs[0].Value)
	for waited := time.Duration(0); ; waited += 10 * time.Millisecond {
		mu.Lock()
		first := firstSeen >= s.perInput
		mu.Unlock()
		if first {
			break
		}
		if waited > 90*time.Second {
			return res, fmt.Errorf("the first warm-up record's outputs did not arrive within 90 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	prod.Stream(context.Background(), s.recs[1:s.warmup], s.rate, nil)
	if s.started != nil {
		s.started()
	}
	prod.Stream(context.Background(), s.recs[s.warmup:], s.rate, func(i int) {
		mu.Lock()
		sent[s.warmup+i] = time.Now()
		mu.Unlock()
	})
	prod.Wait(2 * time.Minute)
	select {
	case <-consumed:
	case <-time.After(90 * time.Second):
	}
	if s.stopped != nil {
		s.stopped()
	}
	cancel()
	<-consumed
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(res.lat)
	slices.Sort(res.lastHop)
	return res, nil
}

// pct is the q-quantile of sorted durations, in ms (0 when empty).
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]) / float64(time.Millisecond)
}

// latencySeries are the runs of one latency measurement at one rate.
type latencySeries struct {
	rate               int
	p50, p95, p99, max []float64 // ms per run
	samples            []int
	missing            []int
	slow               []string
	obs                []observation               // the sampler's window of each run (latency only)
	took               []observation               // each whole run, set up to torn down: what fits weighs
	stages             []map[string]stageQuantiles // per run, "binary stage" → quantiles
}

// add records one run; want is the number of outputs expected, warm-up
// included.
func (s *latencySeries) add(r streamed, want int) {
	s.p50, s.p95, s.p99 = append(s.p50, pct(r.lat, 0.50)), append(s.p95, pct(r.lat, 0.95)), append(s.p99, pct(r.lat, 0.99))
	s.max = append(s.max, pct(r.lat, 1))
	s.samples = append(s.samples, len(r.lat))
	s.missing = append(s.missing, want-r.seen)
}

// seriesAt is the series of rate in ss, creating it.
func seriesAt(ss *[]*latencySeries, rate int) *latencySeries {
	for _, s := range *ss {
		if s.rate == rate {
			return s
		}
	}
	s := &latencySeries{rate: rate}
	*ss = append(*ss, s)
	return s
}

// find is the series of rate, or nil.
func find(ss []*latencySeries, rate int) *latencySeries {
	for _, s := range ss {
		if s.rate == rate {
			return s
		}
	}
	return nil
}

// warmupRecords is the uncounted start of a stream at rate: one record
// alone, then BENCH_E2E_WARMUP at the rate.
func (b *bench) warmupRecords(rate int) int {
	return 1 + int(int64(rate)*int64(b.cfg.warmFor)/int64(time.Second))
}
