package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
)

// seriesResults are the latency series of a phase, one per rate of
// cfg.e2eRates, and the error that ended the phase early.
type seriesResults struct {
	series []*latencySeries
	errs   []string
}

// eachRate runs fn for every repetition and every rate of cfg.e2eRates,
// while repetitions after the first fit before deadline; the first error
// ends the phase.
func (b *bench) eachRate(deadline time.Time, fn func(run, rate int, s *latencySeries) error) seriesResults {
	var r seriesResults
	for run := 0; run < b.cfg.runs; run++ {
		for _, rate := range b.cfg.e2eRates {
			s := seriesAt(&r.series, rate)
			if run > 0 && !fits(deadline, s.took) {
				return r
			}
			began := time.Now()
			err := fn(run, rate, s)
			s.took = append(s.took, observation{wall: time.Since(began)})
			if err != nil {
				r.errs = append(r.errs, err.Error())
				return r
			}
		}
	}
	return r
}

// latencyPhase runs, per repetition, every rate of cfg.e2eRates, each on a
// fresh database and topics with both binaries started anew.
func (b *bench) latencyPhase(deadline time.Time) seriesResults {
	if err := b.recycleWAL(); err != nil {
		b.note("latency: the WAL was not prepared, so the runs may create segments: %v", err)
	}
	return b.eachRate(deadline, func(run, rate int, s *latencySeries) error {
		say("bench: latency run %d/%d: %d passports/s for %s, both binaries running ...", run+1, b.cfg.runs, rate, b.cfg.e2eFor)
		if err := b.latencyRun(run, rate, s); err != nil {
			return err
		}
		i := len(s.p50) - 1
		say("bench:   p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (%d outputs, %d missing); %s", s.p50[i], s.p95[i], s.p99[i], s.samples[i], s.missing[i], s.slow[i])
		return nil
	})
}

func (b *bench) latencyRun(run, rate int, r *latencySeries) error {
	t := b.t
	db := fmt.Sprintf("e2e_%d_%d", rate, run)
	url := b.createServiceDB(db)
	defer b.dropDB(db)
	sfx := fmt.Sprintf("-%d-%d-%d", rate, run, time.Now().UnixNano()%1_000_000)
	in, out1, out2 := b.createTopic("bench.e2e-input"+sfx), b.createTopic("bench.e2e-route-in"+sfx), b.createTopic("bench.e2e-georef"+sfx)
	defer b.deleteTopics(in, out1, out2)
	group := "bench-e2e" + sfx
	env := append(b.serviceEnv(url, in, out1, out2), "KAFKA_CONSUMER_GROUP="+group)
	ing := e2e.NewProc(t, fmt.Sprintf("e2e-ingestor-%d-%d", rate, run), b.bins.Ingestor, env)
	rel := e2e.NewProc(t, fmt.Sprintf("e2e-relay-%d-%d", rate, run), b.bins.Relay, env)
	ing.Start()
	rel.Start()
	defer ing.Stop()
	defer rel.Stop()
	procs := map[string]*e2e.Proc{"ingestor": ing, "relay": rel}
	for _, p := range procs {
		if err := p.WaitReadyErr(90 * time.Second); err != nil {
			return fmt.Errorf("latency run %d at %d/s: %w; log tail:\n%s", run, rate, err, p.LogTail(10))
		}
	}

	n := rate * int(b.cfg.e2eFor/time.Second)
	warmup := b.warmupRecords(rate)
	recs := e2e.GenValid(uint64(100+run), warmup+n)
	index := make(map[string]int, len(recs))
	for i, rec := range recs {
		index[rec.RouteID] = i
	}

	var ckpt0, ckpt1 int
	var s *sampler
	var dp *diskProbe
	var disk diskSamples
	var before, after map[string]map[string]*histogram
	// Which stage holds the records when latency grows: the input lag
	// (produced, not yet committed by the ingestor) and the relay's oldest
	// pending row, at their worst during the run.
	var maxLag int64
	var maxPendingAge float64
	var shape batchShape
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	var obs observation
	res, err := b.runStream(stream{
		rate: rate, recs: recs, inTopic: in, outTopics: []string{out1, out2}, perInput: 2, warmup: warmup,
		identify: func(kr *kgo.Record) (int, bool) {
			i, ok := index[outputRouteID(kr.Value)]
			return i, ok
		},
		started: func() {
			_ = b.scalar(url, `select checkpoints_timed + checkpoints_req from pg_stat_bgwriter`, &ckpt0)
			before = scrapeStages(procs)
			s = b.startSampler(db, procs)
			dp = startDiskProbe(b.pg.Dir())
			go func() {
				defer close(watched)
				shape.sample(ing, time.Now())
				for {
					select {
					case <-stopWatch:
						return
					case <-time.After(watchEvery):
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
					if now := time.Now(); now.Sub(shape.at) >= time.Second {
						shape.sample(ing, now)
					}
				}
			}()
		},
		stopped: func() {
			obs = s.stop()
			disk = dp.stop()
			after = scrapeStages(procs)
			close(stopWatch)
			<-watched
		},
	})
	if err != nil {
		return fmt.Errorf("latency run %d at %d/s: %w", run, rate, err)
	}
	_ = b.scalar(url, `select checkpoints_timed + checkpoints_req from pg_stat_bgwriter`, &ckpt1)
	if len(res.lat) == 0 {
		return fmt.Errorf("latency run %d at %d/s: no output consumed; ingestor log:\n%s\nrelay log:\n%s", run, rate, ing.LogTail(10), rel.LogTail(10))
	}
	r.add(res, 2*len(recs))
	r.obs = append(r.obs, obs)
	stages := stageBudget(before, after)
	stages["bench "+benchStage] = stageQuantiles{binary: "bench", p50: pct(res.lastHop, 0.50), p99: pct(res.lastHop, 0.99),
		count: float64(len(res.lastHop)), fromBench: true}
	if disk.err != nil {
		b.note("latency run %d at %d/s: the disk probe stopped: %v", run+1, rate, disk.err)
	}
	if len(disk.syncs) > 0 {
		stages["bench "+diskStage] = stageQuantiles{binary: "bench", p50: pct(disk.syncs, 0.50), p99: pct(disk.syncs, 0.99),
			count: float64(len(disk.syncs)), fromBench: true}
	}
	r.stages = append(r.stages, stages)
	// Where the tail comes from: the seconds of the run whose worst
	// latency passed 100 ms, and the checkpoints PostgreSQL took meanwhile.
	var slow []string
	for sec := 0; sec <= int(b.cfg.e2eFor/time.Second); sec++ {
		if d := res.slowest[sec]; d > 100*time.Millisecond {
			entry := fmt.Sprintf("%ds:%dms", sec, d.Milliseconds())
			var then []string
			if w := obs.waitsIn(sec, 2); w != "" {
				then = append(then, w)
			}
			if v := obs.vacuumsIn(sec); v != "" {
				then = append(then, "autovacuum "+v)
			}
			if c := obs.coresIn(sec); c != "" {
				then = append(then, "cores "+c)
			}
			if len(then) > 0 {
				entry += " [" + strings.Join(then, "; ") + "]"
			}
			slow = append(slow, entry)
		}
	}
	if len(slow) == 0 {
		slow = []string{"none"}
	}
	r.slow = append(r.slow, fmt.Sprintf("run %d at %s/s: checkpoints %d; worst input lag %d records; worst oldest-pending-row age %.2f s; %s; seconds with a latency over 100 ms (send second:worst [PostgreSQL's top wait events then, avg. backends; what autovacuum was doing; the cores each process used then, and the whole machine]): %s; the disk probe's syncs p50 / p99 / max %.1f / %.1f / %.1f ms, seconds with a sync over 20 ms (second:worst): %s; autovacuum (seconds; a worker in another database of the cluster with its name first): %s",
		run+1, groupDigits(int64(rate)), ckpt1-ckpt0, maxLag, maxPendingAge, &shape, strings.Join(slow, " "),
		pct(disk.syncs, 0.50), pct(disk.syncs, 0.99), pct(disk.syncs, 1), disk.slowSeconds(20*time.Millisecond, int(b.cfg.e2eFor/time.Second)), obs.vacuumSeconds()))
	return nil
}

// watchEvery is how often a latency run reads the input lag and the
// relay's oldest pending age: two admin requests to the broker and a whole
// /metrics of the relay, on the cores the service is measured on. The
// episodes they are to catch last seconds. (Every 100 ms, serving /metrics
// was 5.6 % of the relay's perf samples at 1,000/s; the machine's load in
// runs at 1 s was the same within the noise, docs/performance.md.)
const watchEvery = time.Second

// outputRouteID is the data.routeId of an output event. The service
// renders payloads with fixed member order and no white space
// (passport.Payload), so a byte search finds it without decoding 2,000
// documents a second on the machine being measured. Anything else is
// decoded.
func outputRouteID(value []byte) string {
	const key = `"routeId":"`
	if i := bytes.Index(value, []byte(key)); i >= 0 {
		rest := value[i+len(key):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			return string(rest[:j])
		}
	}
	var v struct {
		Data struct {
			RouteID string `json:"routeId"`
		} `json:"data"`
	}
	_ = json.Unmarshal(value, &v)
	return v.Data.RouteID
}
