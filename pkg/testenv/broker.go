package testenv

import (
	"cmp"
	"context"
	"fmt"
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
)

// devbrokerPkg is the program BrokerProcess runs.
const devbrokerPkg = "github.com/pcp/route-processing/scripts/devbroker"

// BrokerOptions configures a [BrokerProcess].
type BrokerOptions struct {
	// Partitions of auto-created and pre-created topics (default 3).
	Partitions int
	// Topics to create at start.
	Topics []string
}

// BrokerProcess is a Kafka broker of its own (scripts/devbroker, kfake in a
// child process), for tests that freeze the broker: SIGSTOP stops it dead —
// connections stay open, nothing answers, data is kept — which is what a
// hung or partitioned broker looks like to a client, and it affects no other
// test.
type BrokerProcess struct {
	cmd    *exec.Cmd
	addr   string
	log    string
	unreap func()
	exited chan error // receives cmd.Wait's result, then is refilled

	mu sync.Mutex // serialises signals
}

// NewBrokerProcess starts a devbroker on a free 127.0.0.1 port and stops it at
// t's cleanup. The program is built once per test binary.
func NewBrokerProcess(t testing.TB, opts BrokerOptions) *BrokerProcess {
	t.Helper()
	requireMain(t)
	bin, err := devbrokerBinary()
	if err != nil {
		t.Fatalf("testenv: build devbroker: %v", err)
	}
	start := time.Now()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	b := &BrokerProcess{log: filepath.Join(dir, "devbroker.log")}
	logf, err := os.Create(b.log)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer logf.Close()
	args := []string{"-addr", "127.0.0.1:0", "-partitions", strconv.Itoa(cmp.Or(opts.Partitions, DefaultPartitions)), "-ready-file", ready}
	if len(opts.Topics) > 0 {
		args = append(args, "-topics", strings.Join(opts.Topics, ","))
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	// Its own process group, so that the reaper can kill it (and nothing
	// else) by group, and a Ctrl-C meant for the tests reaches it only
	// through them.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("testenv: start devbroker: %v", err)
	}
	b.unreap = reapOnCrash(reapStep{KillGroup: b.cmd.Process.Pid})
	t.Cleanup(b.stop)

	b.exited = make(chan error, 1)
	go func() { b.exited <- b.cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for b.addr == "" {
		if out, err := os.ReadFile(ready); err == nil {
			b.addr = strings.TrimSpace(string(out))
			break
		}
		select {
		case err := <-b.exited:
			b.exited <- err
			t.Fatalf("testenv: devbroker exited before it was ready: %v\n%s", err, b.logText())
		case <-deadline:
			t.Fatalf("testenv: devbroker not ready after 30s\n%s", b.logText())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("testenv: devbroker (pid %d) at %s ready in %s", b.cmd.Process.Pid, b.addr, time.Since(start).Round(time.Millisecond))
	return b
}

// Pid is the broker's process id.
func (b *BrokerProcess) Pid() int { return b.cmd.Process.Pid }

// Addr returns the broker's bootstrap (and only) address, "127.0.0.1:port".
func (b *BrokerProcess) Addr() string { return b.addr }

// Pause freezes the broker (SIGSTOP): requests hang, data is kept. It
// returns once every thread of the broker is stopped — kill(2) only queues
// the stop, and a request sent in that window would still be answered.
func (b *BrokerProcess) Pause(t testing.TB) {
	t.Helper()
	b.signal(t, syscall.SIGSTOP)
	if err := waitStopped(b.cmd.Process.Pid, 5*time.Second); err != nil {
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

func (b *BrokerProcess) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("testenv: signal devbroker: %v", err)
	}
}

func (b *BrokerProcess) stop() {
	defer b.unreap()
	b.mu.Lock()
	_ = b.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.mu.Unlock()
	select {
	case err := <-b.exited:
		b.exited <- err
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

func (b *BrokerProcess) logText() string {
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
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			if goBin, err = exec.LookPath("go"); err != nil {
				devbroker.err = fmt.Errorf("no go command to build %s", devbrokerPkg)
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out := filepath.Join(dir, "devbroker")
		// The test's working directory is inside the module, so the
		// package path resolves against this module's go.mod.
		if b, err := exec.CommandContext(ctx, goBin, "build", "-o", out, devbrokerPkg).CombinedOutput(); err != nil {
			devbroker.err = fmt.Errorf("go build %s: %w\n%s", devbrokerPkg, err, b)
			return
		}
		devbroker.path = out
	})
	return devbroker.path, devbroker.err
}
