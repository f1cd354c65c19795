package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pcp/route-processing/pkg/e2e"
	"github.com/pcp/route-processing/pkg/testenv"
	setup "github.com/pcp/route-processing/scripts/internal/rig"
)

// fallbackIngestRate stands in for the bench's ingest rate when
// bench-report.md has none (passports/s, the default ingest of the first
// report on this machine).
const fallbackIngestRate = 3532

// benchIngestRate is the default-settings ingest rate that the last
// `make bench` wrote to bench-report.md at the repository top: the soak's
// default rate is half of it (issue 12). It says where the figure came from.
func benchIngestRate(t testing.TB) (int, string) {
	path := filepath.Join(moduleRoot(t), "bench-report.md")
	text, err := os.ReadFile(path)
	if err != nil {
		return fallbackIngestRate, fmt.Sprintf("no bench-report.md (%v); the fallback %d/s", err, fallbackIngestRate)
	}
	for _, line := range strings.Split(string(text), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[1]) != "Ingest, passports/s" || strings.TrimSpace(cells[2]) != "default" {
			continue
		}
		if v, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(cells[3]), ",", "")); err == nil && v > 0 {
			return v, fmt.Sprintf("bench-report.md's default ingest, %d/s", v)
		}
	}
	return fallbackIngestRate, fmt.Sprintf("no default ingest row in bench-report.md; the fallback %d/s", fallbackIngestRate)
}

// settings are the soak's knobs, read once from the environment.
type settings struct {
	rate       int
	rateFrom   string // where the rate came from, for the report
	duration   time.Duration
	retention  time.Duration
	hold       time.Duration
	holdStart  time.Duration
	report     string
	relayEnv   []string
	sampleStep time.Duration
}

func loadSettings(t testing.TB) settings {
	bench, from := benchIngestRate(t)
	s := settings{
		rate:       envInt(t, "SOAK_RATE", bench/2),
		rateFrom:   "SOAK_RATE",
		duration:   time.Duration(envFloat(t, "SOAK_MINUTES", 30) * float64(time.Minute)),
		retention:  envDur(t, "SOAK_RETENTION", 2*time.Minute),
		hold:       envDur(t, "SOAK_HOLD", 5*time.Minute),
		report:     os.Getenv("SOAK_REPORT"),
		relayEnv:   strings.Fields(os.Getenv("SOAK_RELAY_ENV")),
		sampleStep: envDur(t, "SOAK_SAMPLE", 10*time.Second),
	}
	if os.Getenv("SOAK_RATE") == "" {
		s.rateFrom = "half of " + from
	}
	s.holdStart = envDur(t, "SOAK_HOLD_START", (s.duration-s.hold)/2)
	if s.report == "" {
		s.report = filepath.Join(moduleRoot(t), "soak-report.md")
	}
	if s.hold > 0 && s.holdStart+s.hold > s.duration {
		t.Fatalf("soak: the hold (%s from %s) ends after the run (%s)", s.hold, s.holdStart, s.duration)
	}
	return s
}

// rig is what every soak phase shares: the built binaries, the cluster, the
// broker and an admin client of each.
type rig struct {
	t testing.TB
	// settings names every server setting the rig gave the cluster, for
	// the report (machineState).
	settings  []string
	bins      e2e.Binaries
	pg        *testenv.PostgresCluster
	admin     *pgxpool.Pool
	broker    *testenv.BrokerProcess
	bootstrap string
	adm       *kadm.Client
}

// newRig builds the binaries and starts PostgreSQL (fsync on, default
// autovacuum; pg_stat_statements for the claim time; extra settings from
// pgSettings) and the dev broker.
func newRig(t testing.TB, pgSettings map[string]string) *rig {
	r := &rig{t: t}
	say("soak: building the binaries, starting PostgreSQL (fsync on) and the dev broker ...")
	conf := map[string]string{
		"shared_preload_libraries": "'pg_stat_statements'",
		"track_io_timing":          "on",
	}
	for k, v := range pgSettings {
		conf[k] = v
	}
	// SOAK_PG_SETTINGS: server settings to try (space-separated name=value,
	// e.g. autovacuum_naptime=10s); the default is PostgreSQL's own.
	for _, kv := range strings.Fields(os.Getenv("SOAK_PG_SETTINGS")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("soak: SOAK_PG_SETTINGS: %q is not name=value", kv)
		}
		conf[k] = "'" + v + "'"
	}
	for k := range conf {
		r.settings = append(r.settings, k)
	}
	sr := setup.Start(t, "soak", testenv.PostgresOptions{Fsync: true, Settings: conf})
	r.bins, r.pg, r.admin, r.broker, r.bootstrap, r.adm = sr.Bins, sr.PG, sr.Admin, sr.Broker, sr.Bootstrap, sr.Adm
	return r
}

// database creates a migrated database with pg_stat_statements and returns
// its URL.
func (r *rig) database(name string) string {
	url := r.pg.CreateDatabase(r.t, name, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		r.t.Fatalf("soak: pool: %v", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `create extension if not exists pg_stat_statements`); err != nil {
		r.t.Fatalf("soak: pg_stat_statements: %v", err)
	}
	return url
}

func (r *rig) createTopic(name string, partitions int32) string {
	return setup.CreateTopic(r.t, r.adm, name, partitions)
}

func (r *rig) serviceEnv(dbURL string, tp topics) []string {
	return []string{
		"DATABASE_URL=" + dbURL,
		"KAFKA_BOOTSTRAP_SERVERS=" + r.bootstrap,
		"TOPIC_INPUT=" + tp.input,
		"TOPIC_INPUT_DLQ=" + tp.dlq,
		"TOPIC_PROCESSED_ROUTE=" + tp.out1,
		"TOPIC_ROUTE_GEOREFERENCE=" + tp.out2,
		"KAFKA_CONSUMER_GROUP=" + tp.group,
		"LOG_LEVEL=info",
	}
}

// topics are a run's topics and consumer group; probe is the broker
// probe's (brokerProbe), empty where none runs.
type topics struct{ input, dlq, out1, out2, probe, group string }

func (r *rig) topics(prefix string) topics {
	return topics{
		input: r.createTopic(prefix+".input", 3),
		dlq:   r.createTopic(prefix+".dlq", 3),
		out1:  r.createTopic(prefix+".route-in", 3),
		out2:  r.createTopic(prefix+".georef", 3),
		probe: r.createTopic(prefix+".probe", 1),
		group: prefix + "-ingestor",
	}
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil {
		t.Fatalf("soak: %s: %q is not an integer", name, v)
	}
	return n
}

func envFloat(t testing.TB, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("soak: %s: %q is not a number", name, v)
	}
	return f
}

func envDur(t testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("soak: %s: %q is not a duration", name, v)
	}
	return d
}

func moduleRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}
