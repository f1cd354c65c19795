package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/record"
)

// The latency floor: the two Kafka hops of the path without the service
// in between, through the same broker at the same rates as the latency
// phase. The bench's input producer → a consumer with the ingestor's
// settings → at once a producer with the relay's settings (two records per
// input, one per output topic, as the relay publishes) → the bench's
// output consumer. What the e2e latency adds to this is the service's.

func (b *bench) floorPhase(deadline time.Time) seriesResults {
	return b.eachRate(deadline, func(run, rate int, s *latencySeries) error {
		say("bench: floor run %d/%d: two Kafka hops alone, %d records/s for %s ...", run+1, b.cfg.runs, rate, b.cfg.floorFor)
		if err := b.floorRun(run, rate, s); err != nil {
			return err
		}
		i := len(s.p50) - 1
		say("bench:   p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (%d outputs, %d missing)", s.p50[i], s.p95[i], s.p99[i], s.samples[i], s.missing[i])
		return nil
	})
}

func (b *bench) floorRun(run, rate int, r *latencySeries) error {
	sfx := fmt.Sprintf("-%d-%d-%d", rate, run, time.Now().UnixNano()%1_000_000)
	in, out1, out2 := b.createTopic("bench.floor-input"+sfx), b.createTopic("bench.floor-out1"+sfx), b.createTopic("bench.floor-out2"+sfx)
	defer b.deleteTopics(in, out1, out2)

	cons, err := b.ingestorConsumer("bench-floor"+sfx, in)
	if err != nil {
		return fmt.Errorf("floor: consumer: %w", err)
	}
	defer cons.Close()
	prod, err := b.relayProducer("bench-floor")
	if err != nil {
		return fmt.Errorf("floor: producer: %w", err)
	}
	defer prod.Close(3 * time.Second)
	assigned := make(chan struct{}, 1)
	if err := cons.Subscribe(func([]int32) {
		select {
		case assigned <- struct{}{}:
		default:
		}
	}, nil); err != nil {
		return fmt.Errorf("floor: subscribe: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polled := make(chan *record.Record, 100_000)
	var pollErr atomic.Value
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		defer close(polled)
		for ctx.Err() == nil {
			rec, err := cons.Poll(50 * time.Millisecond)
			if err != nil {
				pollErr.Store(err)
				return
			}
			if rec != nil {
				polled <- rec
			}
		}
	}()
	fwdDone := make(chan struct{})
	var fwdFailed atomic.Int64
	go func() {
		defer close(fwdDone)
		for rec := range polled {
			// Natural batching: what has been polled meanwhile goes along.
			batch := []*record.Record{rec}
		drain:
			for {
				select {
				case more, ok := <-polled:
					if !ok {
						break drain
					}
					batch = append(batch, more)
				default:
					break drain
				}
			}
			out := make([]record.Record, 0, 2*len(batch))
			for _, r := range batch {
				out = append(out, record.Record{Topic: out1, Key: r.Key, Value: r.Value}, record.Record{Topic: out2, Key: r.Key, Value: r.Value})
			}
			for _, err := range prod.ProduceBatch(context.Background(), out) {
				if err != nil {
					fwdFailed.Add(1)
				}
			}
		}
	}()
	defer func() { cancel(); <-pollDone; <-fwdDone }()

	// The group joined before the clock; the stream's warm-up record then
	// connects the producer and learns the topics' metadata.
	select {
	case <-assigned:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("floor: the consumer got no partitions in 60 s")
	}
	n := rate * int(b.cfg.floorFor/time.Second)
	warmup := b.warmupRecords(rate)
	recs := e2e.GenValid(uint64(200+run), warmup+n)
	for i := range recs {
		recs[i].Key = []byte(strconv.Itoa(i))
	}
	// What the two hops alone cost the machine at this rate: the same
	// harness runs beside the service in the latency phase.
	var s *sampler
	var obs observation
	res, err := b.runStream(stream{
		rate: rate, recs: recs, inTopic: in, outTopics: []string{out1, out2}, perInput: 2, warmup: warmup,
		identify: func(kr *kgo.Record) (int, bool) {
			i, err := strconv.Atoi(string(kr.Key))
			return i, err == nil
		},
		started: func() { s = b.startSampler("postgres", nil) },
		stopped: func() { obs = s.stop() },
	})
	if err != nil {
		return fmt.Errorf("floor run %d at %d/s: %w", run, rate, err)
	}
	if e, ok := pollErr.Load().(error); ok {
		return fmt.Errorf("floor run %d at %d/s: consumer: %w", run, rate, e)
	}
	if f := fwdFailed.Load(); f > 0 {
		b.note("floor run %d at %d/s: %d forwarded records not delivered", run, rate, f)
	}
	if len(res.lat) == 0 {
		return fmt.Errorf("floor run %d at %d/s: no output consumed", run, rate)
	}
	r.add(res, 2*len(recs))
	r.obs = append(r.obs, obs)
	return nil
}
