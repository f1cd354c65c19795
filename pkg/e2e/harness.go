package e2e

// This file is longer than most: it is the one harness of the resilience
// and production-conditions suites (processes, topics, tallies), shared by
// every scenario so that none builds its own.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/passportgen"
	"github.com/pcp/route-processing/pkg/testenv"
)

// Binaries are the service's two programs, built for this test binary.
type Binaries struct {
	Ingestor, Relay string
}

// BuildBinaries builds cmd/ingestor and cmd/outbox-relay into dir
// (testenv.GoBuild: ordinary builds, as shipped; only the test binary is
// instrumented).
func BuildBinaries(t testing.TB, dir string) Binaries {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := testenv.GoBuild(ctx, dir,
		"github.com/pcp/route-processing/cmd/ingestor",
		"github.com/pcp/route-processing/cmd/outbox-relay"); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	t.Logf("e2e: built ingestor and outbox-relay in %s", time.Since(start).Round(time.Millisecond))
	return Binaries{Ingestor: filepath.Join(dir, "ingestor"), Relay: filepath.Join(dir, "outbox-relay")}
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago. A process keeps its port across restarts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return addr
}

// Proc is one of the service's binaries run as a child process (a
// testenv.Process per start). Its output (JSON logs) goes to one file across
// restarts, each start marked by a line of its own; the tail is printed when
// the test fails.
type Proc struct {
	t        testing.TB
	name     string
	bin      string
	args     []string
	given    []string // the env NewProc was given
	env      []string
	httpAddr string
	logPath  string

	mu       sync.Mutex
	proc     *testenv.Process
	starts   int
	expected bool // the current process is being killed or stopped on purpose
	// unexpected counts exits that the test did not cause.
	unexpected int
}

// NewProc prepares (does not start) a process. env is added to
// testenv.ChildEnv, HTTP_ADDR and LOG_FORMAT=json.
func NewProc(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{
		t:        t,
		name:     name,
		bin:      bin,
		args:     args,
		given:    env,
		httpAddr: FreeAddr(t),
		logPath:  logPath(t, name),
	}
	p.env = append(testenv.ChildEnv(), "LOG_FORMAT=json", "HTTP_ADDR="+p.httpAddr)
	p.env = append(p.env, env...)
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("e2e: %s log (%s), last lines:\n%s", p.name, p.logPath, p.LogTail(80))
		}
	})
	return p
}

// Twin prepares another process of the same binary, arguments and
// environment, on an HTTP address of its own: a second replica.
func (p *Proc) Twin(name string) *Proc {
	p.t.Helper()
	return NewProc(p.t, name, p.bin, p.given, p.args...)
}

// EnvLogDir names a directory where the children's logs are kept after the
// test (one file per process, named after the test and the process);
// otherwise they live in the test's temporary directory and only their
// tails are printed, when the test fails.
const EnvLogDir = "E2E_LOG_DIR"

func logPath(t testing.TB, name string) string {
	dir := os.Getenv(EnvLogDir)
	if dir == "" {
		return filepath.Join(t.TempDir(), name+".log")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: %s: %v", EnvLogDir, err)
	}
	base := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return filepath.Join(dir, fmt.Sprintf("%s.%s.%d.log", base, name, time.Now().UnixNano()))
}

// Start starts the process without waiting for readiness.
func (p *Proc) Start() {
	p.t.Helper()
	if err := p.StartErr(); err != nil {
		p.t.Fatalf("e2e: %v", err)
	}
}

// StartErr is Start for goroutines other than the test's (which must not
// call t.Fatal).
func (p *Proc) StartErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !p.proc.Exited() {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.proc.Pid())
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	p.starts++
	fmt.Fprintf(logf, "=== e2e: start #%d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	proc, err := testenv.StartProcess(testenv.ProcessSpec{Name: p.name, Path: p.bin, Args: p.args, Env: p.env, Output: logf})
	if err != nil {
		return err
	}
	p.proc, p.expected = proc, false
	go func() {
		<-proc.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.expected && p.proc == proc {
			p.unexpected++
		}
	}()
	return nil
}

// PID is the current process id (0 before the first start).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return 0
	}
	return p.proc.Pid()
}

// Running reports whether the current process has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc != nil && !p.proc.Exited()
}

// Unexpected is the number of exits the test did not cause.
func (p *Proc) Unexpected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected
}

// Starts is how many times the process was started.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// current marks the running process's exit as expected and returns it (nil
// when nothing runs).
func (p *Proc) current() *testenv.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.Exited() {
		return nil
	}
	p.expected = true
	return p.proc
}

// Kill9 kills the process with SIGKILL (no chance to finish anything) and
// waits for it to be gone.
func (p *Proc) Kill9() {
	if proc := p.current(); proc != nil {
		proc.Kill()
	}
}

// Stop asks the process to stop (SIGTERM) and waits up to 35 s (the contract
// gives it 30 s), then kills it. It returns the exit error of a graceful
// stop (nil for exit status 0).
func (p *Proc) Stop() error {
	if proc := p.current(); proc != nil {
		return proc.Stop(35 * time.Second)
	}
	return nil
}

// Restart starts the process again (after Kill9 or Stop) and waits until it
// is ready.
func (p *Proc) Restart() {
	p.t.Helper()
	p.Start()
	p.WaitReady(60 * time.Second)
}

// WaitReady waits until /readyz answers 200, failing the test if the process
// exits or the time runs out.
func (p *Proc) WaitReady(timeout time.Duration) {
	p.t.Helper()
	if err := p.WaitReadyErr(timeout); err != nil {
		p.t.Fatalf("e2e: %v; its log is printed below", err)
	}
}

// WaitReadyErr is WaitReady returning the failure instead.
func (p *Proc) WaitReadyErr(timeout time.Duration) error {
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("%s was never started", p.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return proc.WaitHTTP(ctx, "http://"+p.httpAddr+"/readyz")
}

// get fetches path from the process's HTTP endpoint; code 0 means no answer.
func (p *Proc) get(path string) (int, string) {
	return testenv.HTTPGet(context.Background(), "http://"+p.httpAddr+path)
}

// Healthz is the status code of /healthz (0 when nothing answers).
func (p *Proc) Healthz() int {
	code, _ := p.get("/healthz")
	return code
}

// Ready reports whether /readyz answers 200.
func (p *Proc) Ready() bool {
	code, _ := p.get("/readyz")
	return code == http.StatusOK
}

// Addr is the HTTP_ADDR of the process (host:port).
func (p *Proc) Addr() string { return p.httpAddr }

// Metric returns the sum of the samples of the Prometheus metric name whose
// labels include every label in match ("category=\"CONTRACT\"" form), and
// whether any sample was found.
func (p *Proc) Metric(name string, match ...string) (float64, bool) {
	code, body := p.get("/metrics")
	if code != http.StatusOK {
		return 0, false
	}
	return parseMetric(body, name, match...)
}

// Metrics reads several unlabelled (or summed) metrics from one scrape, so
// that related series (a histogram's _count and _sum) are of one instant;
// ok is false when the scrape failed or a name was missing.
func (p *Proc) Metrics(names ...string) (values []float64, ok bool) {
	series := make([]Series, len(names))
	for i, name := range names {
		series[i] = Series{Name: name}
	}
	return p.MetricValues(series...)
}

// Series names what [Proc.MetricValues] reads: the sum of the samples of
// the metric Name whose labels include every label in Match
// ("stage=\"committed\"" form).
type Series struct {
	Name  string
	Match []string
}

// MetricValues reads several series from one scrape, so that related
// figures (a histogram's bucket and its _count) are of one instant; ok is
// false when the scrape failed or a series had no sample.
func (p *Proc) MetricValues(series ...Series) (values []float64, ok bool) {
	code, body := p.get("/metrics")
	if code != http.StatusOK {
		return nil, false
	}
	values = make([]float64, len(series))
	for i, x := range series {
		v, found := parseMetric(body, x.Name, x.Match...)
		if !found {
			return nil, false
		}
		values[i] = v
	}
	return values, true
}

func parseMetric(body, name string, match ...string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		labels := ""
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this prefix
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(labels, m) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// logTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// LogContains reports whether the log holds s (across restarts).
func (p *Proc) LogContains(s string) bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte(s))
}

// RunOnce runs bin with args and env to completion (e.g. `ingestor migrate`)
// and returns its combined output.
func RunOnce(ctx context.Context, bin string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(testenv.ChildEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), fmt.Errorf("%s %s: exit %d", filepath.Base(bin), strings.Join(args, " "), ee.ExitCode())
		}
		return string(out), err
	}
	return string(out), nil
}

// Producer writes input records asynchronously and remembers where each
// landed. It is idempotent (franz-go's default), so a retried request does
// not duplicate input records, and it waits out broker outages.
type Producer struct {
	t     testing.TB
	cl    *kgo.Client
	topic string
	wg    sync.WaitGroup

	mu       sync.Mutex
	err      error
	landed   []Landed
	produced int
}

// Landed is where an input record was written, and when its
// acknowledgement arrived.
type Landed struct {
	Partition int32
	Offset    int64
	Index     int // the caller's index of the record
	At        time.Time
}

// NewProducer returns a Producer to topic, closed at t's cleanup. opts are
// added to the client's options (e.g. kgo.ProducerBatchMaxBytes for a topic
// that takes values over 1 MB).
func NewProducer(t testing.TB, bootstrap, topic string, opts ...kgo.Opt) *Producer {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.MaxBufferedRecords(20_000),
		// The fault scenarios cut links on purpose: a connection the
		// proxy closes during the API-versions handshake ends in EOF on
		// the first read, which franz-go otherwise takes for a TLS or SASL
		// misconfiguration and fails the buffered records (seen in CI's
		// kafka-blackhole at the heal).
		kgo.AlwaysRetryEOF(),
	}, opts...)...)
	if err != nil {
		t.Fatalf("e2e: producer: %v", err)
	}
	t.Cleanup(cl.Close)
	return &Producer{t: t, cl: cl, topic: topic}
}

// Send produces one record asynchronously; index identifies it in the
// result of Wait.
func (p *Producer) Send(index int, key, value []byte) {
	p.wg.Add(1)
	r := &kgo.Record{Key: key, Value: value}
	p.cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		defer p.wg.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			if p.err == nil {
				p.err = err
			}
			return
		}
		p.produced++
		p.landed = append(p.landed, Landed{r.Partition, r.Offset, index, time.Now()})
	})
}

// Wait waits for every record's acknowledgement and fails the test on a
// produce error.
func (p *Producer) Wait(timeout time.Duration) []Landed {
	p.t.Helper()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		p.t.Fatalf("e2e: input records not acknowledged within %s", timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		p.t.Fatalf("e2e: produce: %v", p.err)
	}
	return append([]Landed(nil), p.landed...)
}

// FirstLandedAfter is how long after from the first acknowledgement at or
// after it arrived, or -1 if none did yet.
func (p *Producer) FirstLandedAfter(from time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := time.Duration(-1)
	for _, l := range p.landed {
		if d := l.At.Sub(from); d >= 0 && (first < 0 || d < first) {
			first = d
		}
	}
	return first
}

// Stream produces the records at about rate per second (0: as fast as
// possible), calling at(i) just before record i is handed to the client, so
// that a caller can act mid-stream or note the send time.
func (p *Producer) Stream(ctx context.Context, recs []passportgen.Record, rate int, at func(i int)) {
	start := time.Now()
	for i, r := range recs {
		if ctx.Err() != nil {
			return
		}
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		if at != nil {
			at(i)
		}
		p.Send(i, r.Key, r.Value)
	}
}

// GenValid returns n valid passports for seed.
func GenValid(seed uint64, n int) []passportgen.Record {
	rng := passportgen.NewRand(seed)
	out := make([]passportgen.Record, n)
	for i := range out {
		out[i] = passportgen.Valid(rng)
	}
	return out
}
