package relay_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/kafkax"
	"github.com/pcp/route-processing/pkg/obs"
	"github.com/pcp/route-processing/pkg/relay"
	"github.com/pcp/route-processing/pkg/relay/relaytest"
	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testBundle is one test's database and broker.
type testBundle struct {
	url       string
	pool      *pgxpool.Pool
	outbox    *store.Outbox
	bootstrap string
	noListen  bool   // start runs no LISTEN connection (as behind a transaction pooler)
	listenURL string // the LISTEN connection's URL ("": url)
}

func setup(t testing.TB, bootstrap string) *testBundle {
	t.Helper()
	url := testenv.DatabaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, url, "test")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &testBundle{url: url, pool: pool, outbox: store.NewOutbox(pool), bootstrap: bootstrap}
}

// testLogWriter sends logs to t until the test ends, then drops them (the
// librdkafka log bridge may still write after the test returned).
type testLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testLoggerTo logs to the test's log and to also.
func testLoggerTo(t testing.TB, level slog.Level, also io.Writer) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return obs.NewLogger(io.MultiWriter(w, also), "text", level, false)
}

// runningRelay is a relay started by start, with its own registry,
// readiness and /readyz endpoint.
type runningRelay struct {
	relay *relay.Relay
	reg   *prometheus.Registry
	ready *obs.Readiness
	http  *httptest.Server
	logs  *testenv.SyncBuffer
	stop  func()
}

func (b *testBundle) start(t testing.TB, cfg relay.Config) *runningRelay {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	logger := testLoggerTo(t, slog.LevelWarn, logs)
	reg := prometheus.NewRegistry()
	ready := obs.NewReadiness(reg, "test")
	cfg.Registerer, cfg.Readiness = reg, ready
	prod, err := kafkax.NewProducer(logger, kafkax.ProducerConfig{
		ClientConfig:    kafkax.ClientConfig{BootstrapServers: b.bootstrap, ClientID: "relay-test"},
		DeliveryTimeout: cfg.WithDefaults().PublishTimeout,
		Linger:          testLinger(t),
	})
	require.NoError(t, err)
	r, err := relay.New(logger, b.outbox, prod, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	if !b.noListen {
		wg.Go(func() {
			_ = store.Listen(ctx, logger, cmp.Or(b.listenURL, b.url), 100*time.Millisecond, r.Notified, func() { r.Connected(ctx) }, r.Relisten())
		})
	}
	srv := httptest.NewServer(obs.Handler(reg, ready))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			prod.Close(5 * time.Second)
			srv.Close()
		})
	}
	t.Cleanup(stop)
	return &runningRelay{relay: r, reg: reg, ready: ready, http: srv, logs: logs, stop: stop}
}

// testLinger is relay.ProducerLinger, or BENCH_RELAY_LINGER (a duration)
// to measure another.
func testLinger(t testing.TB) time.Duration {
	if v := os.Getenv("BENCH_RELAY_LINGER"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		return d
	}
	return relay.ProducerLinger
}

func (rr *runningRelay) readyz(t testing.TB) int {
	t.Helper()
	code, _ := rr.readyzBody(t)
	return code
}

// state is what a test that waited in vain for rows needs to tell why: the
// outbox rows and /readyz's reasons.
func (rr *runningRelay) state(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	_, why := rr.readyzBody(t)
	return fmt.Sprintf("outbox: %s; /readyz: %s", relaytest.Describe(t, pool), why)
}

// readyzBody is /readyz's status and body (the reasons when not ready).
func (rr *runningRelay) readyzBody(t testing.TB) (int, string) {
	t.Helper()
	resp, err := http.Get(rr.http.URL + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// metric returns the value of a counter or gauge without labels.
func (rr *runningRelay) metric(t testing.TB, name string) float64 {
	t.Helper()
	v, ok := rr.lookup(t, name)
	if !ok {
		t.Fatalf("metric %s not found", name)
	}
	return v
}

// lookup is metric for a series that may not exist yet.
func (rr *runningRelay) lookup(t testing.TB, name string) (float64, bool) {
	t.Helper()
	mfs, err := rr.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// arrivals consumes topics from the start and reports each record with the
// time it arrived here.
type arrival struct {
	rec *kgo.Record
	at  time.Time
}

func consumeArrivals(t testing.TB, bootstrap string, topics ...string) <-chan arrival {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan arrival, 100_000)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { ch <- arrival{rec: r, at: now} })
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); cl.Close() })
	return ch
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	eventuallyOr(t, timeout, msg, cond, nil)
}

// eventuallyOr is eventually that, when cond does not hold in time, adds
// what explain (if not nil) says of the state it found.
func eventuallyOr(t testing.TB, timeout time.Duration, msg string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				msg += "; " + explain()
			}
			t.Fatalf("not within %s: %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
