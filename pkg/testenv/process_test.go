package testenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessStopKillsTheGroup: a child that ignores SIGTERM is killed after
// the grace, and so is the grandchild it left in its process group.
func TestProcessStopKillsTheGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "grandchild")
	p, err := StartProcess(ProcessSpec{
		Name: "stubborn",
		Path: "/bin/sh",
		Args: []string{"-c", `trap "" TERM; sleep 600 & echo $! > "$0"; wait`, pidFile},
		Env:  ChildEnv(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	for deadline := time.Now().Add(10 * time.Second); grandchild == 0; {
		b, _ := os.ReadFile(pidFile)
		grandchild, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if time.Now().After(deadline) {
			t.Fatal("the child did not start its grandchild")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := p.Stop(300 * time.Millisecond); !errors.Is(err, ErrKilled) {
		t.Fatalf("Stop: %v, want a did-not-stop error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Stop took %s", d)
	}
	if !p.Exited() {
		t.Fatal("not reaped after Stop")
	}
	// The grandchild's parent is gone; once killed it is reaped by init.
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(grandchild, 0) == nil; {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(grandchild) + "/stat"); strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still alive after Stop", grandchild)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProcessWaitHTTPFailsOnExit: readiness fails at once, naming the exit,
// when the process ends before it answers.
func TestProcessWaitHTTPFailsOnExit(t *testing.T) {
	t.Parallel()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartProcess(ProcessSpec{Name: "quitter", Path: "/bin/sh", Args: []string{"-c", "exit 3"}, Env: ChildEnv()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.WaitHTTP(ctx, "http://"+addr+"/readyz")
	if err == nil || !strings.Contains(err.Error(), "quitter exited") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("WaitHTTP: %v, want the exit named", err)
	}
	if p.ExitCode() != 3 {
		t.Fatalf("exit code %d, want 3", p.ExitCode())
	}
}
