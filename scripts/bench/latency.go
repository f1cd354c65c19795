package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
)

type latencyResults struct {
	p50, p95, p99, max []float64 // ms per run
	samples            []int
	missing            []int
	slow               []string
	obs                []observation
	errs               []string
}

func (b *bench) latencyPhase(deadline time.Time) latencyResults {
	var r latencyResults
	for run := 0; run < b.cfg.runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: latency run %d/%d: %d passports/s for %s, both binaries running ...", run+1, b.cfg.runs, b.cfg.e2eRate, b.cfg.e2eFor)
		if err := b.latencyRun(run, &r); err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		i := len(r.p50) - 1
		say("bench:   p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (%d outputs, %d missing); %s", r.p50[i], r.p95[i], r.p99[i], r.samples[i], r.missing[i], r.slow[i])
	}
	return r
}

func (b *bench) latencyRun(run int, r *latencyResults) error {
	t := b.t
	db := fmt.Sprintf("e2e_%d", run)
	url := b.pg.CreateDatabase(t, db, true)
	defer b.dropDB(db)
	sfx := fmt.Sprintf("-%d-%d", run, time.Now().UnixNano()%1_000_000)
	in, out1, out2 := b.createTopic("bench.e2e-input"+sfx), b.createTopic("bench.e2e-route-in"+sfx), b.createTopic("bench.e2e-georef"+sfx)
	defer b.deleteTopics(in, out1, out2)
	env := append(b.serviceEnv(url, in, out1, out2), "KAFKA_CONSUMER_GROUP=bench-e2e"+sfx)
	ing := e2e.NewProc(t, fmt.Sprintf("e2e-ingestor-%d", run), b.bins.Ingestor, env)
	rel := e2e.NewProc(t, fmt.Sprintf("e2e-relay-%d", run), b.bins.Relay, env)
	ing.Start()
	rel.Start()
	defer ing.Stop()
	defer rel.Stop()
	for _, p := range []*e2e.Proc{ing, rel} {
		if err := p.WaitReadyErr(90 * time.Second); err != nil {
			return fmt.Errorf("latency run %d: %w; log tail:\n%s", run, err, p.LogTail(10))
		}
	}

	n := b.cfg.e2eRate * int(b.cfg.e2eFor/time.Second)
	recs := e2e.GenValid(uint64(100+run), n)
	sent := make([]time.Time, n)
	index := make(map[string]int, n)
	for i, rec := range recs {
		index[rec.RouteID] = i
	}

	// The consumer runs before the first record is produced.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap), kgo.ConsumeTopics(out1, out2),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var mu sync.Mutex
	var lat []time.Duration
	slowest := map[int]time.Duration{} // second of the run (by send time) -> worst latency
	seen := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for seen < 2*n {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			fs.EachRecord(func(kr *kgo.Record) {
				var v struct {
					Data struct {
						RouteID string `json:"routeId"`
					} `json:"data"`
				}
				if json.Unmarshal(kr.Value, &v) != nil {
					return
				}
				i, ok := index[v.Data.RouteID]
				if !ok {
					return
				}
				mu.Lock()
				if st := sent[i]; !st.IsZero() {
					d := now.Sub(st)
					lat = append(lat, d)
					sec := int(st.Sub(sent[0]) / time.Second)
					slowest[sec] = max(slowest[sec], d)
				}
				seen++
				mu.Unlock()
			})
		}
	}()
	// Let the consumer join its partitions before producing.
	time.Sleep(time.Second)

	prod := e2e.NewProducer(t, b.bootstrap, in)
	var ckpt0, ckpt1 int
	_ = b.scalar(url, `select checkpoints_timed + checkpoints_req from pg_stat_bgwriter`, &ckpt0)
	s := b.startSampler(db, map[string]*e2e.Proc{"ingestor": ing, "relay": rel})
	// Which stage holds the records when latency grows: the input lag
	// (produced, not yet committed by the ingestor) and the relay's oldest
	// pending row, at their worst during the run.
	var maxLag int64
	var maxPendingAge float64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		group := "bench-e2e" + sfx
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ends, err1 := b.adm.ListEndOffsets(ctx, in)
			offs, err2 := b.adm.FetchOffsets(ctx, group)
			cancel()
			if err1 == nil && err2 == nil {
				var lag int64
				ends.Each(func(o kadm.ListedOffset) {
					c, _ := offs.Lookup(in, o.Partition)
					lag += o.Offset - max(c.At, 0)
				})
				maxLag = max(maxLag, lag)
			}
			if age, ok := rel.Metric("route_passport_outbox_oldest_pending_age_seconds"); ok {
				maxPendingAge = max(maxPendingAge, age)
			}
		}
	}()
	prod.Stream(context.Background(), recs, b.cfg.e2eRate, func(i int) {
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
	})
	prod.Wait(2 * time.Minute)
	select {
	case <-consumed:
	case <-time.After(90 * time.Second):
	}
	obs := s.stop()
	close(stopWatch)
	<-watched
	cancel()
	<-consumed
	_ = b.scalar(url, `select checkpoints_timed + checkpoints_req from pg_stat_bgwriter`, &ckpt1)

	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return fmt.Errorf("latency run %d: no output consumed; ingestor log:\n%s\nrelay log:\n%s", run, ing.LogTail(10), rel.LogTail(10))
	}
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
	}
	r.p50, r.p95, r.p99 = append(r.p50, ms(0.50)), append(r.p95, ms(0.95)), append(r.p99, ms(0.99))
	r.max = append(r.max, float64(lat[len(lat)-1])/float64(time.Millisecond))
	r.samples = append(r.samples, len(lat))
	r.missing = append(r.missing, 2*n-seen)
	r.obs = append(r.obs, obs)
	// Where the tail comes from: the seconds of the run whose worst
	// latency passed 100 ms, and the checkpoints PostgreSQL took meanwhile.
	var slow []string
	for sec := 0; sec <= int(b.cfg.e2eFor/time.Second); sec++ {
		if d := slowest[sec]; d > 100*time.Millisecond {
			slow = append(slow, fmt.Sprintf("%ds:%dms", sec, d.Milliseconds()))
		}
	}
	if len(slow) == 0 {
		slow = []string{"none"}
	}
	r.slow = append(r.slow, fmt.Sprintf("run %d: checkpoints %d; worst input lag %d records; worst oldest-pending-row age %.2f s; seconds with a latency over 100 ms (send second:worst): %s",
		run+1, ckpt1-ckpt0, maxLag, maxPendingAge, strings.Join(slow, " ")))
	return nil
}
