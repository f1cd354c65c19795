package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
)

// run is everything a soak measured, for the verdicts and the report.
type run struct {
	cfg      settings
	start    time.Time
	samples  []sample
	load     *load
	probe    *brokerProbe
	hold     heldSnapshot
	status   map[string]int64 // outbox rows per status at the end
	machine  string
	missingP int // passports whose outputs did not all arrive
	missingO int
	// drain is how long the outputs took to catch up after the input
	// stopped; drained says whether they all came.
	drain   time.Duration
	drained bool
	errs    []string
	total   time.Duration
	// passports: the bytes per passport at the end (route_passports, WAL).
	passports string
}

// The drain after the input stops: missing outputs are lost only once none
// has arrived for drainStall, and the wait ends after drainMax anyway.
const (
	drainStall = time.Minute
	drainMax   = 20 * time.Minute
)

// runSoak is make soak.
func runSoak(t testing.TB) {
	cfg := loadSettings(t)
	began := time.Now()
	r := newRig(t, nil)
	url := r.database("soak")
	tp := r.topics("soak")
	env := r.serviceEnv(url, tp)
	relayEnv := append(append([]string{}, env...), "OUTBOX_RETENTION="+cfg.retention.String())
	relayEnv = append(relayEnv, cfg.relayEnv...)
	ing := e2e.NewProc(t, "soak-ingestor", r.bins.Ingestor, env)
	rel := e2e.NewProc(t, "soak-relay", r.bins.Relay, relayEnv)
	ing.Start()
	rel.Start()
	defer ing.Stop()
	defer rel.Stop()
	for _, p := range []*e2e.Proc{ing, rel} {
		if err := p.WaitReadyErr(90 * time.Second); err != nil {
			t.Fatalf("soak: %v; log tail:\n%s", err, p.LogTail(20))
		}
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(r.bootstrap), kgo.DefaultProduceTopic(tp.input),
		kgo.ProducerLinger(2*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		t.Fatalf("soak: producer: %v", err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(r.bootstrap), kgo.ConsumeTopics(tp.out1, tp.out2),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("soak: consumer: %v", err)
	}
	defer cons.Close()
	// A client of its own, so that its records never wait in a batch of
	// the load's.
	probeCl, err := kgo.NewClient(kgo.SeedBrokers(r.bootstrap), kgo.DefaultProduceTopic(tp.probe), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatalf("soak: broker probe: %v", err)
	}
	defer probeCl.Close()

	say("soak: %d passports/s for %s, OUTBOX_RETENTION=%s, snapshot held %s from %s; relay settings %v",
		cfg.rate, cfg.duration, cfg.retention, cfg.hold, cfg.holdStart, cfg.relayEnv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := &run{cfg: cfg, machine: r.machineState(ctx)}
	// The run's clock starts a second from now, so that the consumer has
	// joined before the first passport.
	res.start = time.Now().Add(time.Second)
	clock := windowClock{start: res.start, step: cfg.sampleStep}
	l := newLoad(clock)
	res.load = l
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	go l.consume(consumeCtx, cons)
	time.Sleep(time.Until(res.start))
	res.probe = newBrokerProbe(clock)
	smp, err := newSampler(ctx, url, r.adm, tp, ing, rel, l, res.probe)
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	defer smp.close()
	produceCtx, stopProduce := context.WithTimeout(ctx, cfg.duration)
	defer stopProduce()
	go l.produce(produceCtx, prod, cfg.rate, uint64(res.start.UnixNano()))
	go res.probe.run(produceCtx, probeCl)
	holdDone := make(chan heldSnapshot, 1)
	if cfg.hold > 0 {
		go func() { holdDone <- holdSnapshot(ctx, url, res.start.Add(cfg.holdStart), cfg.hold) }()
	}

	tick := time.NewTicker(cfg.sampleStep)
	for w := 0; ; w++ {
		<-tick.C
		s, errs := smp.read(ctx, w)
		s.T = time.Since(res.start).Round(time.Second)
		s.Hold = cfg.hold > 0 && s.T > cfg.holdStart && s.T-cfg.sampleStep < cfg.holdStart+cfg.hold
		for _, e := range errs {
			res.errs = append(res.errs, fmt.Sprintf("%s: %v", s.T, e))
		}
		res.samples = append(res.samples, s)
		if w%6 == 5 {
			say("soak: %s p50 %.0f ms p99 %.0f ms, in %.0f/s out %.0f/s, lag %d, pending %d (oldest %.1f s), outbox %.0f MB (dead %d), claim %.2f ms, pg %.2f cores%s",
				s.T, s.P50, s.P99, s.InRate, s.OutRate, s.InputLag, s.Pending, s.OldestPending,
				float64(s.Total())/1e6, s.Dead, s.ClaimMs, s.CPUPostgres, map[bool]string{true: " [snapshot held]"}[s.Hold])
		}
		if s.T >= cfg.duration {
			break
		}
	}
	tick.Stop()
	stopProduce()

	// Drain: every passport's two outputs. A run that fell behind still
	// has input lag here, which is not a loss: wait while outputs keep
	// arriving, and call missing only what did not come within
	// drainStall of the last arrival (or drainMax in all).
	drainFrom := time.Now()
	lastProgress, lastMissing := drainFrom, -1
	for time.Since(drainFrom) < drainMax && time.Since(lastProgress) < drainStall {
		_, o := l.missing()
		if o == 0 {
			res.drained = true
			break
		}
		if o != lastMissing {
			lastProgress, lastMissing = time.Now(), o
		}
		time.Sleep(500 * time.Millisecond)
	}
	res.drain = time.Since(drainFrom)
	res.missingP, res.missingO = l.missing()
	say("soak: drained in %s; %d outputs missing", res.drain.Round(time.Second), res.missingO)
	if cfg.hold > 0 {
		res.hold = <-holdDone
		if res.hold.err != nil {
			res.errs = append(res.errs, res.hold.err.Error())
		}
	}
	res.status = statusCounts(ctx, url)
	var wal int64
	for _, x := range res.samples {
		wal += x.WAL
	}
	res.passports = passportBytes(ctx, url, wal)
	res.total = time.Since(began)
	stopConsume()

	v := judge(res)
	if err := writeOutputs(res, v); err != nil {
		t.Errorf("soak: write the report: %v", err)
	}
	fmt.Println()
	for _, x := range v {
		fmt.Printf("%-4s %s: %s\n", x.verdict(), x.name, x.detail)
	}
	if len(res.errs) > 0 {
		say("soak: sampling errors: %s", strings.Join(res.errs, "; "))
	}
	say("soak: report in %s", cfg.report)
}
