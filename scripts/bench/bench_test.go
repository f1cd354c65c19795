//go:build bench

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Sizes and budget; the environment can shrink them for a quick look.
var (
	runs          = envInt("BENCH_RUNS", 3)
	ingestN       = envInt("BENCH_INGEST_N", 25_000) // passports on the pre-filled topic
	perMessageCap = envDur("BENCH_PER_MESSAGE_CAP", 30*time.Second)
	e2eRate       = envInt("BENCH_E2E_RATE", 1_000) // passports/s
	e2eFor        = envDur("BENCH_E2E_DURATION", 30*time.Second)
	backlogRows   = envInt("BENCH_BACKLOG_ROWS", 200_000)
	budget        = envDur("BENCH_BUDGET", 9*time.Minute+30*time.Second)
	// only names the phases to run (ingest, relay, latency, backlog; relay
	// and backlog need ingest); empty runs all.
	only = os.Getenv("BENCH_ONLY")
)

func enabled(phase string) bool {
	return only == "" || slices.Contains(strings.Split(only, ","), phase)
}

const (
	topicInput = "bench.input"
	topicDLQ   = "bench.dlq"
	topicOut1  = "bench.route-in"
	topicOut2  = "bench.georef"
)

type bench struct {
	t         *testing.T
	start     time.Time
	bins      e2e.Binaries
	pg        *testenv.PostgresCluster
	admin     *pgxpool.Pool
	broker    *testenv.BrokerProcess
	bootstrap string
	adm       *kadm.Client
	notes     []string
}

func TestBench(t *testing.T) {
	b := &bench{t: t, start: time.Now()}
	say("bench: building the binaries, starting PostgreSQL (fsync on) and the dev broker ...")
	b.bins = e2e.BuildBinaries(t, t.TempDir())
	b.pg = testenv.NewPostgresCluster(t, testenv.PostgresOptions{Fsync: true})
	admin, err := pgxpool.New(context.Background(), b.pg.URL("postgres"))
	if err != nil {
		t.Fatalf("bench: admin pool: %v", err)
	}
	t.Cleanup(admin.Close)
	b.admin = admin
	b.broker = testenv.NewBrokerProcess(t, testenv.BrokerOptions{Partitions: 3})
	b.bootstrap = b.broker.Addr()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap))
	if err != nil {
		t.Fatalf("bench: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	b.adm = kadm.NewClient(cl)
	for _, tp := range []string{topicInput, topicDLQ, topicOut1, topicOut2} {
		b.createTopic(tp)
	}
	machine := b.machine()

	// Pre-fill the input topic once; every ingest run reads it with a group
	// of its own into a fresh database.
	if !enabled("ingest") {
		ingestN = 0
	}
	say("bench: pre-filling %s with %d passports ...", topicInput, ingestN)
	recs := e2e.GenValid(1, ingestN)
	p := e2e.NewProducer(t, b.bootstrap, topicInput)
	for i, r := range recs {
		p.Send(i, r.Key, r.Value)
	}
	p.Wait(5 * time.Minute)
	recs = nil
	setupDone := time.Since(b.start)

	// The phases share what is left of the budget: ingest 30 %, relay 25 %,
	// latency 20 %, backlog 25 %.
	left := budget - setupDone
	phaseEnd := func(frac float64) time.Time { return time.Now().Add(time.Duration(frac * float64(left))) }

	var (
		ing ingestResults
		rel relayResults
		lat latencyResults
		blg backlogResults
	)
	if enabled("ingest") {
		ing = b.ingestPhase(phaseEnd(0.30))
	}
	if enabled("relay") {
		rel = b.relayPhase(ing.dbs, phaseEnd(0.25))
	}
	if enabled("latency") {
		lat = b.latencyPhase(phaseEnd(0.20))
	}
	if enabled("backlog") {
		blg = b.backlogPhase(ing.dbs, phaseEnd(0.25))
	}

	table := b.table(ing, rel, lat, blg, machine)
	fmt.Println()
	fmt.Println(table)
	b.writeReport(table, ing, rel, lat, blg)
}

// ---------------------------------------------------------------- ingest

type ingestResults struct {
	def, one  []float64 // passports/s per run
	ratios    []float64
	toEnd     []time.Duration // default: process start → committed at the end
	partial   []string
	dbs       []string // databases filled by the default runs (all outbox rows PENDING)
	obsDef    []observation
	obsOne    []observation
	errs      []string
	firstWait []time.Duration
}

func (b *bench) ingestPhase(deadline time.Time) ingestResults {
	var r ingestResults
	for run := 0; run < runs; run++ {
		if run > 0 && !fits(deadline, r.obsDef, r.obsOne) {
			break
		}
		say("bench: ingest run %d/%d: default INGEST_BATCH_SIZE ...", run+1, runs)
		d, err := b.ingestRun("default", "", run, 0)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   default: %.0f passports/s (%s to the end)", d.rate, d.toEnd.Round(time.Millisecond))
		say("bench: ingest run %d/%d: INGEST_BATCH_SIZE=1 ...", run+1, runs)
		o, err := b.ingestRun("one", "1", run, perMessageCap)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   INGEST_BATCH_SIZE=1: %.0f passports/s%s", o.rate, o.partialNote)
		b.dropDB(o.db)
		r.def, r.one = append(r.def, d.rate), append(r.one, o.rate)
		r.ratios = append(r.ratios, d.rate/o.rate)
		r.toEnd = append(r.toEnd, d.toEnd)
		r.firstWait = append(r.firstWait, d.firstCommit)
		r.dbs = append(r.dbs, d.db)
		r.obsDef, r.obsOne = append(r.obsDef, d.obs), append(r.obsOne, o.obs)
		if o.partialNote != "" {
			r.partial = append(r.partial, o.partialNote)
		}
	}
	return r
}

type ingestRun struct {
	rate        float64
	toEnd       time.Duration
	firstCommit time.Duration
	db          string
	obs         observation
	partialNote string
}

// ingestRun consumes the pre-filled topic with a new group into a fresh
// database. The rate is taken from the first commit to the last, so that
// process start and the group join (a second or two, the same for both
// settings) do not dilute it; cap > 0 ends a slow run early and takes the
// rate over what was committed by then.
func (b *bench) ingestRun(label, batch string, run int, capAfterFirst time.Duration) (ingestRun, error) {
	t := b.t
	db := fmt.Sprintf("ingest_%s_%d", label, run)
	url := b.pg.CreateDatabase(t, db, true)
	group := fmt.Sprintf("bench-%s-%d-%d", label, run, time.Now().UnixNano())
	env := b.serviceEnv(url, topicInput, topicOut1, topicOut2)
	env = append(env, "KAFKA_CONSUMER_GROUP="+group)
	if batch != "" {
		env = append(env, "INGEST_BATCH_SIZE="+batch)
	}
	proc := e2e.NewProc(t, fmt.Sprintf("ingestor-%s-%d", label, run), b.bins.Ingestor, env)
	proc.Start()
	defer proc.Stop()
	t0 := time.Now()
	s := b.startSampler(db, map[string]*e2e.Proc{"ingestor": proc})

	var res ingestRun
	res.db = db
	var t1 time.Time
	var c1, c int64
	for {
		time.Sleep(50 * time.Millisecond)
		c = b.committed(group, topicInput)
		now := time.Now()
		if c > 0 && t1.IsZero() {
			t1, c1 = now, c
			res.firstCommit = now.Sub(t0)
		}
		if c >= int64(ingestN) {
			res.toEnd = now.Sub(t0)
			break
		}
		if !proc.Running() {
			res.obs = s.stop()
			return res, fmt.Errorf("ingest %s run %d: the ingestor exited; log tail:\n%s", label, run, proc.LogTail(20))
		}
		if t1.IsZero() && now.Sub(t0) > 2*time.Minute {
			res.obs = s.stop()
			return res, fmt.Errorf("ingest %s run %d: nothing committed in 2 minutes; log tail:\n%s", label, run, proc.LogTail(20))
		}
		if !t1.IsZero() && capAfterFirst > 0 && now.Sub(t1) > capAfterFirst {
			res.partialNote = fmt.Sprintf(" (stopped after %s at %d of %d)", capAfterFirst, c, ingestN)
			break
		}
	}
	res.obs = s.stop()
	if el := time.Since(t1).Seconds(); el > 0 && c > c1 {
		res.rate = float64(c-c1) / el
	}
	return res, nil
}

// committed is the sum of group's committed offsets on topic.
func (b *bench) committed(group, topic string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resps, err := b.adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0
	}
	var sum int64
	for _, o := range resps[topic] {
		if o.At > 0 {
			sum += o.At
		}
	}
	return sum
}

// ---------------------------------------------------------------- relay

type relayResults struct {
	seed, def []float64 // events/s
	ratios    []float64
	rows      int
	obsSeed   []observation
	obsDef    []observation
	errs      []string
}

func (b *bench) relayPhase(srcs []string, deadline time.Time) relayResults {
	var r relayResults
	if len(srcs) == 0 {
		r.errs = append(r.errs, "no database from the ingest phase to copy")
		return r
	}
	seedEnv := []string{"OUTBOX_BATCH_SIZE=50", "OUTBOX_POLL_INTERVAL=1s"}
	for run := 0; run < runs; run++ {
		if run > 0 && !fits(deadline, r.obsSeed, r.obsDef) {
			break
		}
		src := srcs[run%len(srcs)]
		say("bench: relay run %d/%d: seed settings (OUTBOX_BATCH_SIZE=50, OUTBOX_POLL_INTERVAL=1s) ...", run+1, runs)
		s, err := b.relayRun("seed", src, run, seedEnv)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   seed: %.0f events/s", s.rate)
		say("bench: relay run %d/%d: defaults ...", run+1, runs)
		d, err := b.relayRun("default", src, run, nil)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   default: %.0f events/s", d.rate)
		r.seed, r.def = append(r.seed, s.rate), append(r.def, d.rate)
		r.ratios = append(r.ratios, d.rate/s.rate)
		r.rows = d.rows
		r.obsSeed, r.obsDef = append(r.obsSeed, s.obs), append(r.obsDef, d.obs)
	}
	return r
}

type relayRun struct {
	rate  float64
	rows  int
	total time.Duration // process start → all PUBLISHED
	obs   observation
}

// relayRun copies src (a database the ingestor filled; every outbox row
// PENDING) and publishes it. The rate runs from the first published row to
// the last, read from the relay's own counter.
func (b *bench) relayRun(label, src string, run int, extraEnv []string) (relayRun, error) {
	t := b.t
	db := fmt.Sprintf("relay_%s_%d_%d", label, run, time.Now().UnixNano()%1_000_000)
	b.cloneDB(src, db)
	defer b.dropDB(db)
	defer b.resetOutputs()
	url := b.pg.URL(db)
	var res relayRun
	if err := b.scalar(url, `select count(*) from route_passport_outbox where status = 'PENDING'`, &res.rows); err != nil {
		return res, err
	}
	env := append(b.serviceEnv(url, topicInput, topicOut1, topicOut2), extraEnv...)
	proc := e2e.NewProc(t, fmt.Sprintf("relay-%s-%d", label, run), b.bins.Relay, env)
	proc.Start()
	defer proc.Stop()
	t0 := time.Now()
	s := b.startSampler(db, map[string]*e2e.Proc{"relay": proc})
	var t1 time.Time
	var p1, pub float64
	for {
		time.Sleep(50 * time.Millisecond)
		pub, _ = proc.Metric("route_passport_outbox_published_total")
		now := time.Now()
		if pub > 0 && t1.IsZero() {
			t1, p1 = now, pub
		}
		if pub >= float64(res.rows) {
			res.total = now.Sub(t0)
			break
		}
		if !proc.Running() {
			res.obs = s.stop()
			return res, fmt.Errorf("relay %s run %d: the relay exited; log tail:\n%s", label, run, proc.LogTail(20))
		}
		if now.Sub(t0) > 4*time.Minute {
			res.obs = s.stop()
			return res, fmt.Errorf("relay %s run %d: %0.f of %d published after 4 minutes", label, run, pub, res.rows)
		}
	}
	res.obs = s.stop()
	var published int
	if err := b.scalar(url, `select count(*) from route_passport_outbox where status = 'PUBLISHED'`, &published); err != nil {
		return res, err
	}
	if published != res.rows {
		b.note("relay %s run %d: the counter reached %0.f but %d of %d rows are PUBLISHED", label, run, pub, published, res.rows)
	}
	if el := time.Since(t1).Seconds(); el > 0 {
		res.rate = (pub - p1) / el
	}
	return res, nil
}

// ---------------------------------------------------------------- latency

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
	for run := 0; run < runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: latency run %d/%d: %d passports/s for %s, both binaries running ...", run+1, runs, e2eRate, e2eFor)
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

	n := e2eRate * int(e2eFor/time.Second)
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
	prod.Stream(context.Background(), recs, e2eRate, func(i int) {
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
	for sec := 0; sec <= int(e2eFor/time.Second); sec++ {
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

// ---------------------------------------------------------------- backlog

type backlogResults struct {
	secs  []float64 // relay start → all PUBLISHED
	rates []float64
	rows  int
	obs   []observation
	errs  []string
	build time.Duration
}

// backlogPhase builds a database with backlogRows PENDING outbox rows from
// one the ingestor filled: its passports and outbox rows are copied with new
// ids (payloads keep their size and shape; routeId in the payload follows
// the new id) until the outbox holds the target. Each run drains a copy.
func (b *bench) backlogPhase(srcs []string, deadline time.Time) backlogResults {
	var r backlogResults
	if len(srcs) == 0 {
		r.errs = append(r.errs, "no database from the ingest phase to grow")
		return r
	}
	say("bench: building a %d-row backlog ...", backlogRows)
	start := time.Now()
	tpl := "backlog_tpl"
	b.cloneDB(srcs[0], tpl)
	defer b.dropDB(tpl)
	if err := b.amplify(b.pg.URL(tpl), backlogRows); err != nil {
		r.errs = append(r.errs, err.Error())
		return r
	}
	r.build = time.Since(start)
	for run := 0; run < runs; run++ {
		if run > 0 && !fits(deadline, r.obs) {
			break
		}
		say("bench: backlog run %d/%d ...", run+1, runs)
		res, err := b.relayRun("backlog", tpl, run, nil)
		if err != nil {
			r.errs = append(r.errs, err.Error())
			break
		}
		say("bench:   %d rows in %s (%.0f events/s)", res.rows, res.total.Round(time.Millisecond), res.rate)
		r.rows = res.rows
		r.secs = append(r.secs, res.total.Seconds())
		r.rates = append(r.rates, float64(res.rows)/res.total.Seconds())
		r.obs = append(r.obs, res.obs)
	}
	return r
}

func (b *bench) amplify(url string, target int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var have int
	if err := conn.QueryRow(ctx, `select count(*) from route_passport_outbox`).Scan(&have); err != nil {
		return err
	}
	if have == 0 {
		return fmt.Errorf("backlog: the source database has no outbox rows")
	}
	copies := (target - have + have - 1) / have // extra copies of every passport
	stmts := []string{
		`create temp table m as select route_id as old_id, k, gen_random_uuid() as new_id
		   from route_passports, generate_series(1, ` + strconv.Itoa(copies) + `) k`,
		`create temp table p2 as select m.new_id as _new, m.k as _k, p.* from route_passports p join m on m.old_id = p.route_id`,
		`update p2 set route_id = _new, source_offset = source_offset + _k * 1000000000000`,
		`alter table p2 drop column _new, drop column _k`,
		`insert into route_passports select * from p2`,
		`create temp table o2 as select m.new_id as _new, o.* from route_passport_outbox o join m on m.old_id = o.route_id`,
		`update o2 set id = gen_random_uuid(), route_id = _new,
		   payload = jsonb_set(payload, '{data,routeId}', to_jsonb(_new::text))`,
		`alter table o2 drop column _new`,
		`insert into route_passport_outbox select * from o2`,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("backlog: %s: %w", strings.Fields(s)[0:3], err)
		}
	}
	// Trim to the target exactly, newest first, then let the planner and
	// the visibility map catch up as they would on a real table.
	if _, err := conn.Exec(ctx, `delete from route_passport_outbox where id in (
		select id from route_passport_outbox order by created_at desc, id limit greatest(0, (select count(*) from route_passport_outbox) - $1))`, target); err != nil {
		return fmt.Errorf("backlog: trim: %w", err)
	}
	for _, s := range []string{`vacuum analyze route_passports`, `vacuum analyze route_passport_outbox`, `checkpoint`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("backlog: %s: %w", s, err)
		}
	}
	return nil
}

// ---------------------------------------------------------------- helpers

func (b *bench) serviceEnv(dbURL, input, out1, out2 string) []string {
	return []string{
		"DATABASE_URL=" + dbURL,
		"KAFKA_BOOTSTRAP_SERVERS=" + b.bootstrap,
		"TOPIC_INPUT=" + input,
		"TOPIC_INPUT_DLQ=" + topicDLQ,
		"TOPIC_PROCESSED_ROUTE=" + out1,
		"TOPIC_ROUTE_GEOREFERENCE=" + out2,
		"LOG_LEVEL=info",
	}
}

func (b *bench) createTopic(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := b.adm.CreateTopic(ctx, 3, -1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err == nil || strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			return name
		}
		if ctx.Err() != nil {
			b.t.Fatalf("bench: create topic %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *bench) deleteTopics(names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = b.adm.DeleteTopics(ctx, names...)
}

// resetOutputs empties the output topics after a relay run, so that the
// in-memory broker does not grow by hundreds of MB per run.
func (b *bench) resetOutputs() {
	b.deleteTopics(topicOut1, topicOut2)
	time.Sleep(200 * time.Millisecond)
	b.createTopic(topicOut1)
	b.createTopic(topicOut2)
}

func (b *bench) cloneDB(src, dst string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// FILE_COPY: a file-level copy and one checkpoint, instead of writing
	// the whole database through the WAL (PostgreSQL 15's default).
	q := fmt.Sprintf(`create database %s template %s strategy file_copy`, pgx.Identifier{dst}.Sanitize(), pgx.Identifier{src}.Sanitize())
	if _, err := b.admin.Exec(ctx, q); err != nil {
		b.t.Fatalf("bench: %s: %v", q, err)
	}
}

func (b *bench) dropDB(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = b.admin.Exec(ctx, fmt.Sprintf(`drop database if exists %s with (force)`, pgx.Identifier{name}.Sanitize()))
}

func (b *bench) scalar(url, q string, dst any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, q).Scan(dst)
}

func (b *bench) note(format string, args ...any) {
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
	say("bench: "+format, args...)
}

// fits reports whether one more run, as long as the longest so far of each
// kind together, ends before deadline.
func fits(deadline time.Time, kinds ...[]observation) bool {
	var need time.Duration
	for _, k := range kinds {
		var longest time.Duration
		for _, o := range k {
			longest = max(longest, o.wall)
		}
		need += longest + 3*time.Second // database copy/creation, process start
	}
	return time.Now().Add(need).Before(deadline)
}

func say(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ---------------------------------------------------------------- machine

type machineInfo struct {
	cores              int
	cpu, goVer, pgVer  string
	kernel, date, load string
}

func (b *bench) machine() machineInfo {
	m := machineInfo{cores: runtime.NumCPU(), goVer: runtime.Version(), date: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	_ = b.scalar(b.pg.URL("postgres"), `select current_setting('server_version')`, &m.pgVer)
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	if out, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.load = strings.Join(strings.Fields(string(out))[:3], " ")
	}
	return m
}

// ---------------------------------------------------------------- report

func fmtRate(x float64) string {
	if x == 0 {
		return "n/a"
	}
	return groupDigits(int64(x + 0.5))
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func verdict(ok bool, have bool) string {
	switch {
	case !have:
		return "n/a"
	case ok:
		return "yes"
	}
	return "**no**"
}

func (b *bench) table(ing ingestResults, rel relayResults, lat latencyResults, blg backlogResults, m machineInfo) string {
	var sb strings.Builder
	row := func(cells ...string) { sb.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	row("Measure", "Setting", "Median", "Runs", "Target", "Met")
	row("---", "---", "---:", "---:", "---", "---")
	n := func(xs []float64) string { return strconv.Itoa(len(xs)) }

	dI, oI, rI := median(ing.def), median(ing.one), median(ing.ratios)
	row("Ingest, passports/s", "`INGEST_BATCH_SIZE=1`", fmtRate(oI), n(ing.one), "—", "")
	row("Ingest, passports/s", "default (`INGEST_BATCH_SIZE=500`)", fmtRate(dI), n(ing.def), "≥ 5,000/s", verdict(dI >= 5000, len(ing.def) > 0))
	row("Ingest speed-up", "default ÷ per-message, same run", fmt.Sprintf("%.1f×", rI), n(ing.ratios), "≥ 5×", verdict(rI >= 5, len(ing.ratios) > 0))

	sR, dR, rR := median(rel.seed), median(rel.def), median(rel.ratios)
	row("Relay, events/s", "seed (`OUTBOX_BATCH_SIZE=50`, `OUTBOX_POLL_INTERVAL=1s`)", fmtRate(sR), n(rel.seed), "—", "")
	row("Relay, events/s", "default (`OUTBOX_BATCH_SIZE=500`)", fmtRate(dR), n(rel.def), "≥ 8,000/s", verdict(dR >= 8000, len(rel.def) > 0))
	row("Relay speed-up", "default ÷ seed, same run", fmt.Sprintf("%.1f×", rR), n(rel.ratios), "—", "")

	setting := fmt.Sprintf("%s passports/s for %s, both binaries", groupDigits(int64(e2eRate)), e2eFor)
	p99 := median(lat.p99)
	row("End-to-end latency p50, ms", setting, fmt.Sprintf("%.1f", median(lat.p50)), n(lat.p50), "—", "")
	row("End-to-end latency p95, ms", setting, fmt.Sprintf("%.1f", median(lat.p95)), n(lat.p95), "—", "")
	row("End-to-end latency p99, ms", setting, fmt.Sprintf("%.1f", p99), n(lat.p99), "≤ 100 ms", verdict(p99 <= 100, len(lat.p99) > 0))

	bs := median(blg.secs)
	row(fmt.Sprintf("Backlog drain, s (%s rows)", groupDigits(int64(backlogRows))), fmt.Sprintf("relay defaults; %s events/s", fmtRate(median(blg.rates))),
		fmt.Sprintf("%.1f", bs), n(blg.secs), "≤ 30 s", verdict(bs <= 30, len(blg.secs) > 0))
	row("Machine", fmt.Sprintf("%d cores (%s), %s, PostgreSQL %s (fsync on), kfake devbroker", m.cores, m.cpu, m.goVer, m.pgVer), m.date, "", "", "")
	return sb.String()
}

func (b *bench) writeReport(table string, ing ingestResults, rel relayResults, lat latencyResults, blg backlogResults) {
	path := os.Getenv("BENCH_REPORT")
	if path == "" {
		path = filepath.Join(moduleRoot(), "bench-report.md")
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Benchmark report\n\nWritten by `make bench` (scripts/bench.sh → scripts/bench, TestBench) on %s; overwritten by each run. Total time %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), time.Since(b.start).Round(time.Second))
	sb.WriteString(table)
	sb.WriteString("\n## How each figure is taken\n\n")
	fmt.Fprintf(&sb, "- **Ingest**: %s passports pre-filled on a 3-partition input topic; each run starts bin/ingestor with a new consumer group on a fresh, migrated database. "+
		"Rate = passports committed from the first offset commit to the end of every partition ÷ that time (process start and group join excluded; the default runs took %s from process start to the end). "+
		"INGEST_BATCH_SIZE=1 runs stop after %s past the first commit and take the rate over what was committed by then%s. The ratio is taken per run (default and per-message back to back), then the median of the ratios.\n",
		groupDigits(int64(ingestN)), durList(ing.toEnd), perMessageCap, strings.Join(uniq(ing.partial), ";"))
	fmt.Fprintf(&sb, "- **Relay**: a file-level copy of a database the ingestor filled in the ingest phase (%s PENDING rows, real payloads); bin/outbox-relay publishes to the dev broker; rate = published rows (the relay's route_passport_outbox_published_total) from the first to the last ÷ that time; PUBLISHED is then checked in SQL.\n",
		groupDigits(int64(rel.rows)))
	fmt.Fprintf(&sb, "- **Latency**: both binaries running on a fresh database; a producer sends valid passports at a steady rate, noting each send time by routeId; a consumer on both output topics takes receive time − send time for each output record (two per passport). Percentiles over every output record of the run (samples per run: %v; missing outputs per run: %v; max ms per run: %v).\n",
		lat.samples, lat.missing, roundAll(lat.max))
	fmt.Fprintf(&sb, "- **Backlog**: the ingest database grown by SQL to %s outbox rows (copies of the real passports and payloads with new ids; built in %s), copied per run; time from relay process start until every row is published.\n",
		groupDigits(int64(blg.rows)), blg.build.Round(time.Second))
	for _, l := range lat.slow {
		fmt.Fprintf(&sb, "  - latency %s\n", l)
	}
	sb.WriteString("- Each figure is the median of the runs counted in the table (≥ 3 when the time budget allows). Targets are reported, never enforced.\n")

	sb.WriteString("\n## Per run\n\n")
	fmt.Fprintf(&sb, "- ingest default: %s passports/s\n- ingest INGEST_BATCH_SIZE=1: %s passports/s\n- ingest ratio: %s\n", rates(ing.def), rates(ing.one), ratiosStr(ing.ratios))
	fmt.Fprintf(&sb, "- relay seed: %s events/s\n- relay default: %s events/s\n- relay ratio: %s\n", rates(rel.seed), rates(rel.def), ratiosStr(rel.ratios))
	fmt.Fprintf(&sb, "- latency p50/p95/p99 ms: %v / %v / %v\n", roundAll(lat.p50), roundAll(lat.p95), roundAll(lat.p99))
	fmt.Fprintf(&sb, "- backlog drain s: %v (events/s %s)\n", roundAll(blg.secs), rates(blg.rates))

	sb.WriteString("\n## What the machine was doing\n\nCPU in cores (CPU seconds ÷ wall seconds) of the service process, of the PostgreSQL processes serving the cluster, and of the whole machine (busy share of all cores; “rest” = busy cores not used by the service or PostgreSQL: the dev broker, the benchmark's own producer/consumer, and any other load on the machine, which skews the figures); PostgreSQL wait events sampled every 100 ms from pg_stat_activity (active backends only; `CPU` = no wait event).\n\n")
	sb.WriteString("| Phase | Service CPU | PostgreSQL CPU | Machine busy | Rest of the machine | Top wait events |\n|---|---:|---:|---:|---:|---|\n")
	for _, ph := range []struct {
		name string
		obs  []observation
	}{
		{"ingest default", ing.obsDef}, {"ingest INGEST_BATCH_SIZE=1", ing.obsOne},
		{"relay seed", rel.obsSeed}, {"relay default", rel.obsDef},
		{"latency (ingestor + relay)", lat.obs}, {"backlog drain", blg.obs},
	} {
		if len(ph.obs) == 0 {
			continue
		}
		o := ph.obs[len(ph.obs)/2]
		fmt.Fprintf(&sb, "| %s | %s | %.2f | %.0f %% | %.2f | %s |\n", ph.name, o.procCPU(), o.pgCores, 100*o.machineBusy, o.rest(), o.topWaits(5))
	}
	var errs []string
	for _, e := range [][]string{ing.errs, rel.errs, lat.errs, blg.errs} {
		errs = append(errs, e...)
	}
	if len(errs)+len(b.notes) > 0 {
		sb.WriteString("\n## Problems\n\n")
		for _, e := range append(errs, b.notes...) {
			sb.WriteString("- " + strings.ReplaceAll(e, "\n", "\n  ") + "\n")
		}
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.t.Errorf("bench: write %s: %v", path, err)
		return
	}
	for _, e := range errs {
		fmt.Println("bench: problem:", e)
	}
	fmt.Printf("bench: report written to %s\n", path)
}

func rates(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmtRate(x))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func ratiosStr(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.1f×", x))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func roundAll(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(int(x*10+0.5)) / 10
	}
	return out
}

func durList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(100*time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}

func uniq(xs []string) []string {
	slices.Sort(xs)
	return slices.Compact(xs)
}

func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// ---------------------------------------------------------------- sampling

// observation is what a sampler saw during one measured run.
type observation struct {
	wall        time.Duration
	procCores   map[string]float64
	pgCores     float64
	machineBusy float64
	waits       map[string]int
	samples     int
}

// rest is the CPU, in cores, that neither the service nor PostgreSQL used:
// the broker, the benchmark itself, and anything else running on the
// machine (other test runs skew the figures; this column shows it).
func (o observation) rest() float64 {
	r := o.machineBusy * float64(runtime.NumCPU())
	for _, c := range o.procCores {
		r -= c
	}
	return max(0, r-o.pgCores)
}

func (o observation) procCPU() string {
	var s []string
	for _, k := range sortedKeys(o.procCores) {
		s = append(s, fmt.Sprintf("%s %.2f", k, o.procCores[k]))
	}
	return strings.Join(s, ", ")
}

func (o observation) topWaits(n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	total := 0
	for k, v := range o.waits {
		all = append(all, kv{k, v})
		total += v
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	var s []string
	for i, e := range all {
		if i == n {
			break
		}
		s = append(s, fmt.Sprintf("%s %.1f", e.k, float64(e.v)/float64(max(o.samples, 1))))
	}
	if len(s) == 0 {
		return "none active"
	}
	return strings.Join(s, ", ") + " (avg. backends)"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type sampler struct {
	stopc chan struct{}
	done  chan observation
}

// startSampler samples, every 100 ms until stop, the CPU time of procs, of
// every PostgreSQL process in pg_stat_activity of the cluster, of the whole
// machine, and the wait events of the active backends of db.
func (b *bench) startSampler(db string, procs map[string]*e2e.Proc) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan observation, 1)}
	go func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, b.pg.URL(db))
		start := time.Now()
		busy0, total0 := machineCPU()
		procStart := map[string]float64{}
		for name, p := range procs {
			procStart[name] = procCPU(p.PID())
		}
		pgFirst, pgLast := map[int]float64{}, map[int]float64{}
		o := observation{waits: map[string]int{}, procCores: map[string]float64{}}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stopc:
				wall := time.Since(start)
				o.wall = wall
				for name, p := range procs {
					o.procCores[name] = (procCPU(p.PID()) - procStart[name]) / wall.Seconds()
				}
				var pg float64
				for pid, last := range pgLast {
					pg += last - pgFirst[pid]
				}
				o.pgCores = pg / wall.Seconds()
				busy1, total1 := machineCPU()
				if total1 > total0 {
					o.machineBusy = (busy1 - busy0) / (total1 - total0)
				}
				if conn != nil {
					conn.Close(ctx)
				}
				s.done <- o
				return
			case <-tick.C:
			}
			if err != nil || conn == nil {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			rows, qerr := conn.Query(qctx, `select pid, coalesce(datname, '') = $1, coalesce(state = 'active', false),
				coalesce(wait_event_type || ':' || wait_event, 'CPU') from pg_stat_activity where pid <> pg_backend_pid()`, db)
			if qerr == nil {
				o.samples++
				for rows.Next() {
					var pid int
					var ours, active bool
					var wait string
					if rows.Scan(&pid, &ours, &active, &wait) != nil {
						continue
					}
					c := procCPU(pid)
					if _, ok := pgFirst[pid]; !ok {
						pgFirst[pid] = c
					}
					pgLast[pid] = c
					if ours && active {
						o.waits[wait]++
					}
				}
				rows.Close()
			}
			cancel()
		}
	}()
	return s
}

func (s *sampler) stop() observation {
	close(s.stopc)
	return <-s.done
}

// procCPU is the CPU seconds (user + system) of pid so far.
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// machineCPU returns busy and total jiffies of all CPUs.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}
