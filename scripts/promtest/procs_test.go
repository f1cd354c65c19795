package promtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the module root, two levels up from this package.
var repoRoot = filepath.Join("..", "..")

// buildBinaries builds both programs as shipped (no -race) into a temporary
// directory.
func buildBinaries(t *testing.T) (ingestor, relay string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/ingestor", "./cmd/outbox-relay")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1") // librdkafka through cgo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtest: go build ./cmd/ingestor ./cmd/outbox-relay: %v\n%s", err, out)
	}
	t.Logf("promtest: built both binaries in %s", time.Since(start).Round(time.Millisecond))
	return filepath.Join(dir, "ingestor"), filepath.Join(dir, "outbox-relay")
}

// childEnv is what a child gets from the test's environment: enough to run,
// nothing that configures the service.
func childEnv(extra ...string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// runOnce runs bin to completion (e.g. `ingestor migrate`).
func runOnce(t *testing.T, bin string, env []string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv(env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtest: %s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
}

// startProc starts bin with env and HTTP_ADDR on a free port, stops it
// (SIGTERM) at cleanup and prints its log's tail if the test failed. It
// returns the HTTP address once /healthz answers.
func startProc(t *testing.T, bin string, env []string) string {
	t.Helper()
	addr := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = childEnv(append(env, "HTTP_ADDR="+addr, "LOG_FORMAT=json", "LOG_LEVEL=info")...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("promtest: start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("promtest: %s log, last lines:\n%s", filepath.Base(bin), strings.Join(lines, "\n"))
		}
	})
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("promtest: %s exited at start (log %s)", filepath.Base(bin), logPath)
		default:
		}
		if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("promtest: %s: /healthz did not answer within 30s", filepath.Base(bin))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventually polls cond every 500ms until it returns "" (done) or timeout
// passes; then the test fails with cond's last explanation.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("promtest: %s: not within %s: %s", what, timeout, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func describe(res []series, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d series %v", len(res), res)
}
