package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/testenv"
	"github.com/pcp/route-processing/scripts/internal/progtb"
	"github.com/pcp/route-processing/scripts/internal/rig"
)

// config holds the sizes and the budget; the environment can shrink them for
// a quick look.
type config struct {
	runs int
	// ingestRuns is the ingest phase's count of default runs (each with
	// its ceiling run and its per-message run): its ratio is the target
	// nearest its bound, and one pair's ratio moves by 10–25 points from
	// the next on these hosts, so its median takes more pairs than the
	// other figures (BENCH_INGEST_RUNS; 5, or BENCH_RUNS when only that
	// is set, for a quick look).
	ingestRuns    int
	ingestN       int // passports on the pre-filled topic
	perMessageCap time.Duration
	e2eRates      []int // passports/s, each a series of the latency and floor phases
	e2eFor        time.Duration
	floorFor      time.Duration
	// warmFor is how long each latency and floor run streams at its rate
	// before the clock starts (not counted).
	warmFor     time.Duration
	backlogRows int
	budget      time.Duration
	// only names the phases to run (see phases; relay, relay-db and backlog
	// need ingest); empty runs all.
	only []string
	// serviceEnv is added to both binaries' environment in every phase
	// (BENCH_SERVICE_ENV, comma-separated NAME=value), to compare a setting
	// against the defaults run by run.
	serviceEnv []string
	// dbSQL runs in every database the bench creates for a phase, after
	// its migration (BENCH_DB_SQL), e.g. a table's autovacuum settings.
	dbSQL string
}

func configFromEnv() config {
	c := config{
		runs:          envInt("BENCH_RUNS", 3),
		ingestN:       envInt("BENCH_INGEST_N", 25_000),
		perMessageCap: envDur("BENCH_PER_MESSAGE_CAP", 10*time.Second),
		e2eRates:      envInts("BENCH_E2E_RATES", []int{1_000, 4_000}),
		e2eFor:        envDur("BENCH_E2E_DURATION", 30*time.Second),
		floorFor:      envDur("BENCH_FLOOR_DURATION", 15*time.Second),
		warmFor:       envDurOrOff("BENCH_E2E_WARMUP", 10*time.Second),
		backlogRows:   envInt("BENCH_BACKLOG_ROWS", 200_000),
		budget:        envDur("BENCH_BUDGET", 16*time.Minute),
	}
	defIngestRuns := 5
	if os.Getenv("BENCH_RUNS") != "" {
		defIngestRuns = c.runs
	}
	c.ingestRuns = envInt("BENCH_INGEST_RUNS", defIngestRuns)
	if v := os.Getenv("BENCH_ONLY"); v != "" {
		c.only = strings.Split(v, ",")
	}
	if v := os.Getenv("BENCH_SERVICE_ENV"); v != "" {
		c.serviceEnv = strings.Split(v, ",")
	}
	c.dbSQL = os.Getenv("BENCH_DB_SQL")
	return c
}

func (c config) enabled(phase string) bool {
	return len(c.only) == 0 || slices.Contains(c.only, phase)
}

const (
	topicInput = "bench.input"
	topicDLQ   = "bench.dlq"
	topicOut1  = "bench.route-in"
	topicOut2  = "bench.georef"
)

type bench struct {
	t         *progtb.T
	cfg       config
	start     time.Time
	bins      e2e.Binaries
	pg        *testenv.PostgresCluster
	admin     *pgxpool.Pool
	broker    *testenv.BrokerProcess
	bootstrap string
	adm       *kadm.Client
	notes     []string
}

// results are what the phases measured, for the table and the report.
type results struct {
	ing     ingestResults
	ingCeil ingestCeilingResults
	rel     relayResults
	relCeil relayCeilingResults
	relDB   relayDBResults
	lat     seriesResults
	floor   seriesResults
	blg     backlogResults
	// capacity is the host's, read before each phase and at the end.
	capacity []capacityReading
}

// phase is one measured part of the benchmark: a name (BENCH_ONLY), its
// share of the budget (relative to the other enabled phases), and the function that runs its
// repetitions until its deadline and stores its figures. A ceiling phase (a
// DB-only writer, a raw producer, a two-hop Kafka floor) is one more entry.
type phase struct {
	name  string
	share float64
	run   func(b *bench, deadline time.Time, r *results)
	// within names the phase that runs this one's measurements inside its
	// own when both are enabled; this one then runs only alone.
	within string
}

// phases are run in this order, each ceiling next to the service figure it
// bounds; relay, relay-db and backlog copy the ingest phase's databases.
func phases() []phase {
	return []phase{
		{name: "ingest", share: 0.24, run: func(b *bench, d time.Time, r *results) {
			r.ing, r.ingCeil = b.ingestPhase(d, b.cfg.enabled("ingest-ceiling"))
		}},
		// With ingest enabled, the ceiling's runs are paired with its runs
		// inside the ingest phase.
		{name: "ingest-ceiling", share: 0.04, run: func(b *bench, d time.Time, r *results) { r.ingCeil = b.ingestCeilingPhase(d) }, within: "ingest"},
		{name: "relay", share: 0.08, run: func(b *bench, d time.Time, r *results) { r.rel = b.relayPhase(r.ing.dbs, d) }},
		{name: "relay-ceiling", share: 0.03, run: func(b *bench, d time.Time, r *results) { r.relCeil = b.relayCeilingPhase(d) }},
		{name: "relay-db", share: 0.03, run: func(b *bench, d time.Time, r *results) { r.relDB = b.relayDBPhase(r.ing.dbs, d) }},
		{name: "latency", share: 0.36, run: func(b *bench, d time.Time, r *results) { r.lat = b.latencyPhase(d) }},
		{name: "floor", share: 0.17, run: func(b *bench, d time.Time, r *results) { r.floor = b.floorPhase(d) }},
		{name: "backlog", share: 0.12, run: func(b *bench, d time.Time, r *results) { r.blg = b.backlogPhase(r.ing.dbs, d) }},
	}
}

func phaseNames() string {
	var names []string
	for _, ph := range phases() {
		names = append(names, ph.name)
	}
	return strings.Join(names, ", ")
}

func main() {
	os.Exit(runMain())
}

func runMain() int {
	defer testenv.Open()()
	return progtb.Run("bench", func(t *progtb.T) {
		b := &bench{t: t, cfg: configFromEnv(), start: time.Now()}
		b.run()
	})
}

func (b *bench) run() {
	t := b.t
	say("bench: building the binaries, starting PostgreSQL (fsync on) and the dev broker ...")
	r := rig.Start(t, "bench", testenv.PostgresOptions{Fsync: true})
	b.bins, b.pg, b.admin, b.broker, b.bootstrap, b.adm = r.Bins, r.PG, r.Admin, r.Broker, r.Bootstrap, r.Adm
	for _, tp := range []string{topicInput, topicDLQ, topicOut1, topicOut2} {
		b.createTopic(tp)
	}
	machine := b.machine()

	// Pre-fill the input topic once; every ingest run reads it with a group
	// of its own into a fresh database.
	prefill := b.cfg.ingestN
	if !b.cfg.enabled("ingest") {
		prefill = 0
	}
	say("bench: pre-filling %s with %d passports ...", topicInput, prefill)
	recs := e2e.GenValid(1, prefill)
	p := e2e.NewProducer(t, b.bootstrap, topicInput)
	for i, r := range recs {
		p.Send(i, r.Key, r.Value)
	}
	p.Wait(5 * time.Minute)
	recs = nil

	for _, name := range b.cfg.only {
		if !slices.ContainsFunc(phases(), func(ph phase) bool { return ph.name == name }) {
			b.note("BENCH_ONLY names %q, which is no phase; the phases are %s", name, phaseNames())
		}
	}

	// The enabled phases share what is left of the budget in proportion to
	// their shares; time a phase leaves unused goes to those after it.
	end := b.start.Add(b.cfg.budget)
	var shares float64
	for _, ph := range phases() {
		if b.cfg.enabled(ph.name) {
			shares += ph.share
		}
	}
	var res results
	for _, ph := range phases() {
		if !b.cfg.enabled(ph.name) {
			continue
		}
		if ph.within != "" && b.cfg.enabled(ph.within) {
			shares -= ph.share // its time goes to the phases after it
			continue
		}
		res.capacity = append(res.capacity, readCapacity("before "+ph.name))
		left := time.Until(end)
		ph.run(b, time.Now().Add(time.Duration(float64(left)*ph.share/shares)), &res)
		shares -= ph.share
	}
	res.capacity = append(res.capacity, readCapacity("at the end"))

	table := b.table(&res, machine)
	targets := targetsTable(&res)
	fmt.Println()
	fmt.Println(table)
	fmt.Println(targets)
	fmt.Println(budgetTable(res.lat.series))
	b.writeReport(table, targets, &res)
}
