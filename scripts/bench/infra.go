package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/scripts/internal/rig"
)

func (b *bench) serviceEnv(dbURL, input, out1, out2 string) []string {
	return append([]string{
		"DATABASE_URL=" + dbURL,
		"KAFKA_BOOTSTRAP_SERVERS=" + b.bootstrap,
		"TOPIC_INPUT=" + input,
		"TOPIC_INPUT_DLQ=" + topicDLQ,
		"TOPIC_PROCESSED_ROUTE=" + out1,
		"TOPIC_ROUTE_GEOREFERENCE=" + out2,
		"LOG_LEVEL=info",
	}, b.cfg.serviceEnv...)
}

// createServiceDB creates and migrates a database for a phase, then runs
// cfg.dbSQL in it (BENCH_DB_SQL), so that a table setting can be set
// against the migrations' own as BENCH_SERVICE_ENV sets a service's.
// Databases cloned from it inherit both.
func (b *bench) createServiceDB(name string) string {
	url := b.pg.CreateDatabase(b.t, name, true)
	if b.cfg.dbSQL != "" {
		b.execIn(name, url, "BENCH_DB_SQL", b.cfg.dbSQL, time.Minute)
	}
	return url
}

// execIn runs sql in database name (at url) on a connection of its own,
// bounded by timeout; what names it in the failure that ends the bench.
func (b *bench) execIn(name, url, what, sql string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.t.Fatalf("bench: %s: connect to %s: %v", what, name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		b.t.Fatalf("bench: %s in %s: %v", what, name, err)
	}
}

func (b *bench) createTopic(name string) string {
	return rig.CreateTopic(b.t, b.adm, name, 3)
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

// vacuumKept vacuums and analyzes a database that later phases read
// (an ingest run's, the relay's source), right after it was filled and
// before the next timing starts. Left to autovacuum, the same work came at
// the launcher's whim, inside whichever phase was being timed then: the
// latency runs' lines showed a worker in ingest_default_0 during a run.
// Copies of it (cloneDB) start without the statistics that would bring
// autovacuum to them, so only their own runs' changes do.
func (b *bench) vacuumKept(name string) {
	start := time.Now()
	b.execIn(name, b.pg.URL(name), "vacuum", "vacuum (analyze)", 5*time.Minute)
	say("bench:   vacuumed and analyzed %s in %s (outside the timings)", name, time.Since(start).Round(time.Millisecond))
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

// envInts reads a comma-separated list of positive integers.
func envInts(name string, def []int) []int {
	var out []int
	for _, f := range strings.Split(os.Getenv(name), ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return def
	}
	return out
}

// envDurOrOff is envDur for a duration whose 0 means "none" (a warm-up
// that can be turned off).
func envDurOrOff(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v == 0 {
		return 0
	}
	return envDur(name, def)
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
