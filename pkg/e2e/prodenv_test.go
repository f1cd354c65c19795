package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/ingest"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/testenv"
)

// This file is the scaffolding of the production-conditions scenarios
// (prod_test.go): a stack whose binaries reach PostgreSQL and Kafka through
// whatever stands in between (PgBouncer, a multi-host URL, a fault proxy)
// while the test checks through direct connections, and a monitor that
// samples readiness and progress so that each scenario can say when things
// stopped and how fast they came back.

// prodEnv is where a production stack's binaries and the test connect.
type prodEnv struct {
	// ServiceDB is the binaries' DATABASE_URL; DirectDB is used for
	// `ingestor migrate` (a direct connection, as the README asks) and for
	// the test's checks. DirectDB defaults to ServiceDB.
	ServiceDB, DirectDB string
	// Bootstrap is every Kafka client's bootstrap address.
	Bootstrap string
	// IngestorEnv and RelayEnv are added to the defaults (later wins).
	IngestorEnv, RelayEnv []string
}

// newProdStack is newStack for a database and a broker the scenario made
// itself. The retry and probe backoffs keep their production defaults
// (INGEST_MAX_BACKOFF, OUTBOX_PROBE_MAX_BACKOFF, OUTBOX_POLL_INTERVAL):
// recovering within seconds must not depend on test tuning. Leases and
// publish backoffs are short, as in newStack, so that abandoned claims come
// back within the test and burned attempts show up as FAILED rows.
func newProdStack(t *testing.T, bins Binaries, name string, e prodEnv) *stack {
	t.Helper()
	if e.DirectDB == "" {
		e.DirectDB = e.ServiceDB
	}
	s := &stack{t: t, dbURL: e.DirectDB, bootstrap: e.Bootstrap}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := RunOnce(ctx, bins.Ingestor, []string{"DATABASE_URL=" + e.DirectDB, "LOG_FORMAT=json"}, "migrate"); err != nil {
		t.Fatalf("e2e: ingestor migrate: %v\n%s", err, out)
	}
	s.topics = topics{
		Input:     testenv.CreateTopic(t, e.Bootstrap, name+".input", 3),
		DLQ:       testenv.CreateTopic(t, e.Bootstrap, name+".dlq", 3),
		Processed: testenv.CreateTopic(t, e.Bootstrap, name+".route-in", 3),
		GeoRef:    testenv.CreateTopic(t, e.Bootstrap, name+".georef", 3),
	}
	s.group = name + "-group"
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Bootstrap))
	if err != nil {
		t.Fatalf("e2e: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	s.adm = kadm.NewClient(cl)
	pcfg, err := pgxpool.ParseConfig(e.DirectDB)
	if err != nil {
		t.Fatalf("e2e: pool config: %v", err)
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatalf("e2e: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	s.pool = pool

	common := s.topics.serviceEnv(e.ServiceDB, e.Bootstrap)
	ingEnv := append(append([]string{}, common...), "KAFKA_CONSUMER_GROUP="+s.group)
	relayEnv := append(append([]string{}, common...),
		"OUTBOX_LOCK_TIMEOUT=10s",
		"OUTBOX_INITIAL_BACKOFF=200ms",
		"OUTBOX_MAX_BACKOFF=2s",
	)
	s.ingestor = NewProc(t, "ingestor", bins.Ingestor, append(ingEnv, e.IngestorEnv...))
	s.relay = NewProc(t, "outbox-relay", bins.Relay, append(relayEnv, e.RelayEnv...))
	return s
}

// ingestorDefaults and relayDefaults undo newStack's quick-recovery tuning,
// for scenarios built on newStack that measure recovery with the shipped
// defaults. They are read from the code, so a changed default is what the
// scenarios measure.
var (
	ingestorDefaults = []string{"INGEST_MAX_BACKOFF=" + ingest.DefaultConfig().MaxBackoff.String()}
	relayDefaults    = []string{
		"OUTBOX_PROBE_MAX_BACKOFF=" + relay.Config{}.WithDefaults().ProbeMaxBackoff.String(),
		"OUTBOX_POLL_INTERVAL=" + relay.Config{}.WithDefaults().PollInterval.String(),
	}
)

// point is one sample of the monitor.
type point struct {
	at       time.Time
	ok       bool // readiness, or whether the count query answered
	rows     int  // route_passports
	pubished int  // PUBLISHED outbox rows
}

// monitor samples, each on its own goroutine so that a hanging endpoint
// does not stall the others: the ingestor's and the relay's /readyz, and the
// row and PUBLISHED counts through the test's direct connection.
type monitor struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu                 sync.Mutex
	ing, relay, counts []point
}

func startMonitor(s *stack) *monitor {
	m := &monitor{stop: make(chan struct{})}
	loop := func(dst *[]point, sample func() point) {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for {
				p := sample()
				m.mu.Lock()
				*dst = append(*dst, p)
				m.mu.Unlock()
				select {
				case <-m.stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	loop(&m.ing, func() point { at := time.Now(); return point{at: at, ok: s.ingestor.Ready()} })
	loop(&m.relay, func() point { at := time.Now(); return point{at: at, ok: s.relay.Ready()} })
	loop(&m.counts, func() point {
		at := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p := point{at: at}
		err := s.pool.QueryRow(ctx, `select (select count(*) from route_passports),
			(select count(*) from route_passport_outbox where status = 'PUBLISHED')`).Scan(&p.rows, &p.pubished)
		p.ok = err == nil
		return p
	})
	return m
}

func (m *monitor) halt() {
	close(m.stop)
	m.wg.Wait()
}

func (m *monitor) series(which string) []point {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch which {
	case "ingestor":
		return append([]point(nil), m.ing...)
	case "relay":
		return append([]point(nil), m.relay...)
	}
	return append([]point(nil), m.counts...)
}

// notReady counts the readiness samples taken in [from, to) that were not
// 200, of all taken then.
func (m *monitor) notReady(which string, from, to time.Time) (down, polls int) {
	for _, p := range m.series(which) {
		if !p.at.Before(from) && p.at.Before(to) {
			polls++
			if !p.ok {
				down++
			}
		}
	}
	return down, polls
}

// firstNotReady is how long after from the first non-200 sample came (-1:
// none before to).
func (m *monitor) firstNotReady(which string, from, to time.Time) time.Duration {
	for _, p := range m.series(which) {
		if !p.at.Before(from) && p.at.Before(to) && !p.ok {
			return p.at.Sub(from)
		}
	}
	return -1
}

// readyAgain is how long after from the process was ready and stayed so
// for the rest of the run (-1: never).
func (m *monitor) readyAgain(which string, from time.Time) time.Duration {
	s := m.series(which)
	at := time.Duration(-1)
	for _, p := range s {
		if p.at.Before(from) {
			continue
		}
		if !p.ok {
			at = -1
		} else if at < 0 {
			at = max(0, p.at.Sub(from))
		}
	}
	return at
}

// inFlight bounds what can land right after a fault ends without the
// service having recovered: the ingestor's batch being retried (one
// INGEST_BATCH_SIZE, 500 rows) and the relay's claimed batches whose marks
// are being retried (OUTBOX_WORKERS × OUTBOX_BATCH_SIZE, 1,000 rows). Growth
// beyond that is new work.
const (
	rowsInFlight      = 500
	publishedInFlight = relayWorkers * relayBatch
)

// moving is how long after from the count (rows or published) first grew
// by more than what was in flight at from (-1: never): the moment the
// service moves new data again.
func (m *monitor) moving(published bool, from time.Time) time.Duration {
	beyond := rowsInFlight
	if published {
		beyond = publishedInFlight
	}
	return m.movingBeyond(published, from, beyond)
}

// movingBeyond is moving with the in-flight allowance given: 0 where the
// fault held the input too (a broker freeze), so that whatever lands first
// is the recovery and no backlog exists to cross a larger threshold.
func (m *monitor) movingBeyond(published bool, from time.Time, beyond int) time.Duration {
	val := func(p point) int {
		if published {
			return p.pubished
		}
		return p.rows
	}
	base := -1
	for _, p := range m.series("counts") {
		if !p.ok {
			continue
		}
		if p.at.Before(from) {
			base = val(p)
			continue
		}
		if base < 0 {
			base = val(p)
			continue
		}
		if val(p) > base+beyond {
			return p.at.Sub(from)
		}
	}
	return -1
}

// grew is how much the count (rows or published) grew between from and to,
// as sampled: during a blackhole it must be 0, or the fault did not hold.
func (m *monitor) grew(published bool, from, to time.Time) int {
	first, last := -1, -1
	for _, p := range m.series("counts") {
		if !p.ok || p.at.Before(from) || !p.at.Before(to) {
			continue
		}
		v := p.rows
		if published {
			v = p.pubished
		}
		if first < 0 {
			first = v
		}
		last = v
	}
	if first < 0 {
		return 0
	}
	return last - first
}

// secs formats a measured delay (-1 reads "never").
func secs(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// logLine is the part of a JSON log line the checks read.
type logLine struct {
	Time  time.Time `json:"time"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	Err   string    `json:"err"`
	size  int
}

// logLines parses a process's JSON log (lines that are not JSON, such as
// the harness's start markers and librdkafka's own, are skipped).
func logLines(p *Proc) []logLine {
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Level != "" {
			l.size = len(sc.Bytes())
			out = append(out, l)
		}
	}
	return out
}

// firstLogged is how long after from the process first logged msg, or -1
// if it did not.
func firstLogged(p *Proc, msg string, from time.Time) time.Duration {
	for _, l := range logLines(p) {
		if l.Msg == msg && !l.Time.Before(from) {
			return l.Time.Sub(from)
		}
	}
	return -1
}

// repeatedProblems returns the WARN/ERROR messages logged more than limit
// times ("msg ×count"), and the size of the longest log line. Dead-letter
// lines are not problems: invalid input is expected, one line each.
func repeatedProblems(p *Proc, limit int) (repeated []string, longest int) {
	counts := map[string]int{}
	for _, l := range logLines(p) {
		longest = max(longest, l.size)
		if (l.Level == "WARN" || l.Level == "ERROR") && !strings.Contains(l.Msg, "dead-lettered") {
			counts[l.Msg]++
		}
	}
	for msg, n := range counts {
		if n > limit {
			repeated = append(repeated, fmt.Sprintf("%q ×%d", msg, n))
		}
	}
	sort.Strings(repeated)
	return repeated, longest
}

// problemSample is the first WARN/ERROR lines of a log with their errors,
// for a failure message.
func problemSample(p *Proc, n int) string {
	var b strings.Builder
	for _, l := range logLines(p) {
		if l.Level != "WARN" && l.Level != "ERROR" {
			continue
		}
		e := l.Err
		if len(e) > 300 {
			e = e[:300] + fmt.Sprintf("...(%d bytes)", len(l.Err))
		}
		fmt.Fprintf(&b, "\n  %s %s: %s", l.Level, l.Msg, e)
		if n--; n == 0 {
			break
		}
	}
	return b.String()
}
