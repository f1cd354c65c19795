package testenv

import (
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
	"strings"
	"syscall"
	"time"
)

// The process helper is the one home of "run a program as a child": the
// service's binaries in pkg/e2e and dlqreplay's integration test, the dev
// broker, `make run` (scripts/devrun) and `make bench`. A child leads a
// process group of its own, so that a Ctrl-C meant for the parent reaches it
// only through the parent's orderly stop, and so that the reaper (see
// reaper.go) can SIGKILL the whole group if the parent dies without stopping
// it.

// ProcessSpec says how to start a [Process].
type ProcessSpec struct {
	// Name names the process in errors.
	Name string
	// Path is the program; Args its arguments (without argv[0]).
	Path string
	Args []string
	// Env is the whole environment of the child (start from [ChildEnv]).
	Env []string
	// Dir is the working directory (default: the parent's).
	Dir string
	// Output receives stdout and stderr. An *os.File is handed to the child
	// as is; another writer is fed through a pipe by a goroutine (a line
	// prefixer, a buffer). Nil discards the output.
	Output io.Writer
}

// ErrKilled is what Stop returns when the grace ran out and the group was
// killed.
var ErrKilled = errors.New("did not stop within the grace after SIGTERM; killed")

// Process is a running (or exited) child started by [StartProcess]. It is
// reaped by a goroutine of its own: Done is closed once it has exited and
// been waited for.
type Process struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // cmd.Wait's result, set before done is closed
	unreap func()
}

// StartProcess starts spec's program in a process group of its own and
// registers the group with the crash reaper.
func StartProcess(spec ProcessSpec) (*Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	if spec.Output != nil {
		cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that keeps the output pipe open must not keep Wait
	// waiting for ever once the child itself is gone.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Process{name: spec.Name, cmd: cmd, done: make(chan struct{})}
	p.unreap = reapOnCrash(reapStep{KillGroup: cmd.Process.Pid})
	go func() {
		p.err = cmd.Wait()
		p.unreap()
		close(p.done)
	}()
	return p, nil
}

// Name is the spec's name.
func (p *Process) Name() string { return p.name }

// Pid is the child's process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited (and been reaped).
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the exit error once Done is closed (nil for status 0).
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// ExitCode is the exit status once Done is closed (-1 when killed by a signal).
func (p *Process) ExitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the process (not its group); a process already gone
// is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

// Kill SIGKILLs the whole process group (no chance to finish anything) and
// waits until the process is reaped.
func (p *Process) Kill() {
	if !p.Exited() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	}
	<-p.done
}

// Stop asks the process group to stop (SIGCONT, in case it is frozen, then
// SIGTERM), waits up to grace, then SIGKILLs the group; it always returns
// with the process reaped. The error says the grace ran out, or is the exit
// error of a graceful stop (nil for status 0).
func (p *Process) Stop(grace time.Duration) error {
	if !p.Exited() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s (grace %s): %w", p.name, grace, ErrKilled)
	}
}

// WaitHTTP polls url until it answers 200, and fails when the process exits
// first or ctx ends (the error then names the last answer).
func (p *Process) WaitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body, err := httpGet(ctx, client, url)
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case err == nil:
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s answered 200 (%v)", p.name, url, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not 200 (last: %s): %w", p.name, url, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// HTTPGet fetches url (2 s timeout) and returns its status and body (at
// most 1 MiB); code 0 means nothing answered.
func HTTPGet(ctx context.Context, url string) (int, string) {
	code, body, err := httpGet(ctx, http.DefaultClient, url)
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

func httpGet(ctx context.Context, client *http.Client, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// ChildEnv is what a child gets from this process's environment: enough to
// run, nothing that configures the service (a DATABASE_URL or KAFKA_* of the
// developer's shell must not leak into a test). Append the child's own
// settings.
func ChildEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago and that this process has not handed out before.
func FreeAddr() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(port)), nil
}

// GoBuild builds the packages (import paths of this module) into dir with
// cgo on (the service uses librdkafka). They are ordinary builds (no -race,
// no coverage): children must behave like the shipped programs. The Go
// build cache makes a rebuild cheap.
func GoBuild(ctx context.Context, dir string, pkgs ...string) error {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			return errors.New("no go command (neither in GOROOT/bin nor on PATH)")
		}
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}
