package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// The reaper is the crash-safety net. In-process teardown (Main, t.Cleanup)
// cannot run when the test binary panics in a test goroutine, is killed by
// `go test -timeout`, or receives SIGKILL, and `pg_ctl start` detaches the
// postmaster into its own session, so nothing else would ever stop it. The
// reaper is this very test binary re-executed (see init below) with its stdin
// the read end of a pipe whose write end only the parent holds: the kernel
// closes that end however the parent dies, the reaper reads EOF and undoes
// whatever is still registered — stops PostgreSQL clusters, kills broker
// process groups, removes containers and temporary directories.

const reaperEnv = "TESTENV_REAPER"

func init() {
	if os.Getenv(reaperEnv) == "1" {
		os.Exit(runReaper(os.Stdin))
	}
}

// reapStep is one undo step; exactly one field is set.
type reapStep struct {
	// Exec runs a command (e.g. `pg_ctl stop -m immediate`).
	Exec []string `json:"exec,omitempty"`
	// KillGroup SIGKILLs a process group (after SIGCONT, in case it is
	// stopped).
	KillGroup int `json:"killGroup,omitempty"`
	// Container force-removes a Docker container.
	Container string `json:"container,omitempty"`
	// RemoveAll removes a directory tree.
	RemoveAll string `json:"removeAll,omitempty"`
}

type reapMsg struct {
	ID    int64      `json:"id"`
	Done  bool       `json:"done,omitempty"`
	Steps []reapStep `json:"steps,omitempty"`
}

func runReaper(r io.Reader) int {
	// The reaper runs in its own process group, but a terminal hang-up or
	// an interrupt sent to a whole session must not stop it before it has
	// done its work.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT)
	pending := map[int64][]reapStep{}
	dec := json.NewDecoder(r)
	for {
		var m reapMsg
		if err := dec.Decode(&m); err != nil {
			break // EOF: the parent is gone, one way or another.
		}
		if m.Done {
			delete(pending, m.ID)
		} else {
			pending[m.ID] = m.Steps
		}
	}
	ids := make([]int64, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Reverse(ids) // undo in reverse order of creation
	for _, id := range ids {
		for _, s := range pending[id] {
			_ = s.run()
		}
	}
	return 0
}

func (s reapStep) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case len(s.Exec) > 0:
		return exec.CommandContext(ctx, s.Exec[0], s.Exec[1:]...).Run()
	case s.KillGroup > 0:
		_ = syscall.Kill(-s.KillGroup, syscall.SIGCONT)
		return syscall.Kill(-s.KillGroup, syscall.SIGKILL)
	case s.Container != "":
		pool, err := dockertest.NewPool("")
		if err != nil {
			return err
		}
		return pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: s.Container, Force: true, RemoveVolumes: true})
	case s.RemoveAll != "":
		return os.RemoveAll(s.RemoveAll)
	}
	return nil
}

var reaper struct {
	mu     sync.Mutex
	w      *os.File
	cmd    *exec.Cmd
	nextID int64
	err    error
}

// reapOnCrash registers steps that the reaper runs if this process dies
// before calling the returned function (which unregisters them).
func reapOnCrash(steps ...reapStep) (unregister func()) {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if reaper.w == nil && reaper.err == nil {
		reaper.err = startReaper()
	}
	if reaper.err != nil {
		return func() {}
	}
	reaper.nextID++
	id := reaper.nextID
	if err := sendReap(reapMsg{ID: id, Steps: steps}); err != nil {
		return func() {}
	}
	return func() {
		reaper.mu.Lock()
		defer reaper.mu.Unlock()
		_ = sendReap(reapMsg{ID: id, Done: true})
	}
}

func sendReap(m reapMsg) error {
	if reaper.w == nil {
		return errors.New("reaper stopped")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = reaper.w.Write(append(b, '\n'))
	return err
}

func startReaper() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find test binary: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("reaper pipe: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), reaperEnv+"=1")
	cmd.Stdin = r
	// Its own process group: a Ctrl-C delivered to the foreground group
	// (the test binary and `go test`) must not reach it. No stdout/stderr:
	// a grandchild holding `go test`'s output pipe would make it wait.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("start reaper: %w", err)
	}
	r.Close()
	reaper.w, reaper.cmd = w, cmd
	return nil
}

// stopReaper closes the pipe (the reaper then finds nothing left to do) and
// waits for it to exit.
func stopReaper() {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if reaper.w == nil {
		return
	}
	reaper.w.Close()
	reaper.w = nil
	done := make(chan struct{})
	go func() { _ = reaper.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
	}
	reaper.err = errors.New("testenv: reaper already stopped (Main has returned)")
}
