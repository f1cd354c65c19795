package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcp/route-processing/pkg/passportgen"
)

// Binaries are the service's two programs, built for this test binary.
type Binaries struct {
	Ingestor, Relay string
}

// BuildBinaries builds cmd/ingestor and cmd/outbox-relay into dir. They are
// ordinary builds (no -race, no coverage): the children must behave like the
// shipped programs, and only the test binary is instrumented. The Go build
// cache makes a rebuild cheap.
func BuildBinaries(t testing.TB, dir string) Binaries {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("e2e: no go command to build the Binaries: %v", err)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/pcp/route-processing/cmd/ingestor",
		"github.com/pcp/route-processing/cmd/outbox-relay")
	// The Binaries use librdkafka through cgo.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2e: go build the Binaries: %v\n%s", err, out)
	}
	t.Logf("e2e: built ingestor and outbox-relay in %s", time.Since(start).Round(time.Millisecond))
	return Binaries{Ingestor: filepath.Join(dir, "ingestor"), Relay: filepath.Join(dir, "outbox-relay")}
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago. A process keeps its port across restarts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("e2e: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// baseEnv is what every child gets from the test's environment: enough to
// run, nothing that configures the service (a DATABASE_URL or KAFKA_* of the
// developer's shell must not leak into a test).
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Proc is one of the service's binaries run as a child process. Its output
// (JSON logs) goes to one file across restarts, each start marked by a line
// of its own; the tail is printed when the test fails.
type Proc struct {
	t        testing.TB
	name     string
	bin      string
	args     []string
	env      []string
	httpAddr string
	logPath  string
	client   *http.Client

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has exited
	waitErr  error
	starts   int
	expected bool // the current process is being killed or stopped on purpose
	// unexpected counts exits that the test did not cause.
	unexpected int
	lastExit   string
}

// NewProc prepares (does not start) a process. env is added to baseEnv,
// HTTP_ADDR and LOG_FORMAT=json.
func NewProc(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{
		t:        t,
		name:     name,
		bin:      bin,
		args:     args,
		httpAddr: FreeAddr(t),
		logPath:  logPath(t, name),
		client:   &http.Client{Timeout: 2 * time.Second},
	}
	p.env = append(baseEnv(), "LOG_FORMAT=json", "HTTP_ADDR="+p.httpAddr)
	p.env = append(p.env, env...)
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("e2e: %s log (%s), last lines:\n%s", p.name, p.logPath, p.LogTail(80))
		}
	})
	return p
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

// start is Start for goroutines other than the test's (which must not call
// t.Fatal).
func (p *Proc) StartErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	p.starts++
	fmt.Fprintf(logf, "=== e2e: start #%d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the test binary, even if it dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.expected = cmd, false
	done := make(chan struct{})
	p.done = done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.lastExit = fmt.Sprintf("%v", err)
		if !p.expected && p.cmd == cmd {
			p.unexpected++
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Proc) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// PID is the current process id (0 before the first start).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the current process has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked()
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

// signal sends sig to a running process, marking the exit as expected, and
// returns the channel closed at exit (nil when nothing runs).
func (p *Proc) signal(sig syscall.Signal) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() {
		return nil
	}
	p.expected = true
	_ = p.cmd.Process.Signal(sig)
	return p.done
}

// Kill9 kills the process with SIGKILL (no chance to finish anything) and
// waits for it to be gone.
func (p *Proc) Kill9() {
	if done := p.signal(syscall.SIGKILL); done != nil {
		<-done
	}
}

// Stop asks the process to stop (SIGTERM) and waits up to 35 s (the contract
// gives it 30 s), then kills it. It returns the exit error of a graceful
// stop (nil for exit status 0).
func (p *Proc) Stop() error {
	done := p.signal(syscall.SIGTERM)
	if done == nil {
		return nil
	}
	select {
	case <-done:
	case <-time.After(35 * time.Second):
		p.Kill9()
		return fmt.Errorf("%s did not stop within 35s of SIGTERM", p.name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
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
	deadline := time.Now().Add(timeout)
	for {
		if code, _ := p.get("/readyz"); code == http.StatusOK {
			return nil
		}
		p.mu.Lock()
		exited, lastExit := p.cmd == nil || p.exitedLocked(), p.lastExit
		p.mu.Unlock()
		if exited {
			return fmt.Errorf("%s exited before it was ready (%s)", p.name, lastExit)
		}
		if time.Now().After(deadline) {
			_, body := p.get("/readyz")
			return fmt.Errorf("%s not ready after %s (/readyz: %s)", p.name, timeout, strings.TrimSpace(body))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches path from the process's HTTP endpoint; code 0 means no answer.
func (p *Proc) get(path string) (int, string) {
	resp, err := p.client.Get("http://" + p.httpAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
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
	cmd.Env = append(baseEnv(), env...)
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

// Landed is where an input record was written.
type Landed struct {
	Partition int32
	Offset    int64
	Index     int // the caller's index of the record
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
		p.landed = append(p.landed, Landed{r.Partition, r.Offset, index})
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
