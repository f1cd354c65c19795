package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// devbrokerPkg is the program BrokerProcess runs.
const devbrokerPkg = "github.com/pcp/route-processing/scripts/devbroker"

// BrokerOptions configures a [BrokerProcess].
type BrokerOptions struct {
	// Partitions of auto-created and pre-created topics (default 3).
	Partitions int
	// Topics to create at start.
	Topics []string
	// Addr to listen on (default 127.0.0.1 and a free port).
	Addr string
	// Output receives the broker's log (default: a file in a temporary
	// directory, printed when it fails to start).
	Output io.Writer
	// Retention drops records older than it (devbroker -retention; 0, the
	// default: keep everything).
	Retention time.Duration
	// Brokers in the cluster (devbroker -brokers; default 1). With more
	// than one, [BrokerProcess.MoveLeaders] moves partition leaders and
	// group coordinators among them.
	Brokers int
}

// BrokerProcess is a Kafka broker of its own (scripts/devbroker, kfake in a
// child process), for tests that freeze the broker: SIGSTOP stops it dead —
// connections stay open, nothing answers, data is kept — which is what a
// hung or partitioned broker looks like to a client, and it affects no other
// test.
type BrokerProcess struct {
	proc *Process
	addr string
	dir  string // temporary: the ready file and the default log
	log  string // "" when the caller took the output

	mu sync.Mutex // serialises signals
}

// NewBrokerProcess starts a devbroker on a free 127.0.0.1 port and stops it at
// t's cleanup. The program is built once per test binary.
func NewBrokerProcess(t testing.TB, opts BrokerOptions) *BrokerProcess {
	t.Helper()
	requireMain(t)
	start := time.Now()
	b, err := StartBrokerProcess(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	t.Logf("testenv: devbroker (pid %d) at %s ready in %s", b.Pid(), b.addr, time.Since(start).Round(time.Millisecond))
	return b
}

// StartBrokerProcess is NewBrokerProcess for a program (after [Open]): it
// returns once the broker listens; the caller stops it with Close.
func StartBrokerProcess(opts BrokerOptions) (*BrokerProcess, error) {
	bin, err := devbrokerBinary()
	if err != nil {
		return nil, fmt.Errorf("build devbroker: %w", err)
	}
	dir, err := os.MkdirTemp("", "testenv-broker-")
	if err != nil {
		return nil, err
	}
	b := &BrokerProcess{dir: dir}
	ready := filepath.Join(dir, "ready")
	out := opts.Output
	if out == nil {
		b.log = filepath.Join(dir, "devbroker.log")
		logf, err := os.Create(b.log)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		defer logf.Close()
		out = logf
	}
	args := []string{"-addr", cmp.Or(opts.Addr, "127.0.0.1:0"), "-partitions", strconv.Itoa(cmp.Or(opts.Partitions, DefaultPartitions)), "-ready-file", ready}
	if len(opts.Topics) > 0 {
		args = append(args, "-topics", strings.Join(opts.Topics, ","))
	}
	if opts.Retention > 0 {
		args = append(args, "-retention", opts.Retention.String())
	}
	if opts.Brokers > 1 {
		args = append(args, "-brokers", strconv.Itoa(opts.Brokers))
	}
	b.proc, err = StartProcess(ProcessSpec{Name: "devbroker", Path: bin, Args: args, Env: os.Environ(), Output: out})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	deadline := time.After(30 * time.Second)
	for b.addr == "" {
		if addr, err := os.ReadFile(ready); err == nil && len(strings.TrimSpace(string(addr))) > 0 {
			b.addr = strings.TrimSpace(string(addr))
			break
		}
		select {
		case <-b.proc.Done():
			err := fmt.Errorf("devbroker exited before it was ready: %v\n%s", b.proc.Err(), b.logText())
			_ = b.Close()
			return nil, err
		case <-deadline:
			err := fmt.Errorf("devbroker not ready after 30s\n%s", b.logText())
			_ = b.Close()
			return nil, err
		case <-time.After(10 * time.Millisecond):
		}
	}
	return b, nil
}

// Pid is the broker's process id.
func (b *BrokerProcess) Pid() int { return b.proc.Pid() }

// Process is the broker's child process.
func (b *BrokerProcess) Process() *Process { return b.proc }

// Addr returns the broker's bootstrap (and only) address, "127.0.0.1:port".
func (b *BrokerProcess) Addr() string { return b.addr }

// Pause freezes the broker (SIGSTOP): requests hang, data is kept. It
// returns once every thread of the broker is stopped — kill(2) only queues
// the stop, and a request sent in that window would still be answered.
func (b *BrokerProcess) Pause(t testing.TB) {
	t.Helper()
	b.signal(t, syscall.SIGSTOP)
	if err := waitStopped(b.Pid(), 5*time.Second); err != nil {
		t.Fatalf("testenv: pause devbroker: %v", err)
	}
}

// waitStopped polls /proc until every thread of pid is in state T. Where
// there is no /proc it returns at once.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if len(stats) == 0 {
			return nil
		}
		stopped := true
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // thread exited
			}
			// "pid (comm) S ...": the state follows the last ')'.
			i := strings.LastIndexByte(string(b), ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %s", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume thaws a paused broker (SIGCONT).
func (b *BrokerProcess) Resume(t testing.TB) {
	t.Helper()
	b.signal(t, syscall.SIGCONT)
}

// MoveLeaders draws every partition's leader and every consumer group's
// coordinator again at random among the brokers (SIGUSR1 to devbroker;
// with three, about two of three move), as a rolling restart or a leader
// election does; it needs BrokerOptions.Brokers > 1 to move anything.
func (b *BrokerProcess) MoveLeaders(t testing.TB) {
	t.Helper()
	b.signal(t, syscall.SIGUSR1)
}

func (b *BrokerProcess) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.proc.Signal(sig); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Close stops the broker (thawed first: a stopped process cannot act on
// SIGTERM; SIGKILL after 10 s) and removes its temporary directory.
func (b *BrokerProcess) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.proc.Stop(10 * time.Second)
	_ = os.RemoveAll(b.dir)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == -1 {
		err = nil // ended by our SIGTERM
	}
	return err
}

func (b *BrokerProcess) logText() string {
	if b.log == "" {
		return "(log: see the broker's output)"
	}
	out, _ := os.ReadFile(b.log)
	return string(out)
}

var devbroker struct {
	once sync.Once
	path string
	err  error
}

// devbrokerBinary builds scripts/devbroker once per test binary into a
// temporary directory removed at Main's teardown. The Go build cache makes
// this cheap after the first run.
func devbrokerBinary() (string, error) {
	devbroker.once.Do(func() {
		dir, err := os.MkdirTemp("", "testenv-devbroker-")
		if err != nil {
			devbroker.err = err
			return
		}
		unreap := reapOnCrash(reapStep{RemoveAll: dir})
		atTeardown(func() { _ = os.RemoveAll(dir); unreap() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// The working directory is inside the module, so the package path
		// resolves against this module's go.mod.
		if err := GoBuild(ctx, dir, devbrokerPkg); err != nil {
			devbroker.err = err
			return
		}
		out := filepath.Join(dir, "devbroker")
		devbroker.path = out
	})
	return devbroker.path, devbroker.err
}
