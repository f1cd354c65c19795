// Package progtb is a testing.TB for programs (scripts/bench, scripts/soak):
// it lets a program use the harness helpers of pkg/e2e and pkg/testenv,
// which take a testing.TB, instead of copying them.
package progtb

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// T is the testing.TB of one program run: Fatalf ends the run (a panic that
// Run recovers), Cleanup functions run at the end, last
// registered first, Logf prints. Only the main goroutine may call Fatalf.
//
// The embedded testing.TB is nil: it only satisfies the interface's
// unexported method; a helper calling a method not overridden here panics,
// which names the method to add.
type T struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// fatal is the panic value of Fatalf.
type fatal struct{ msg string }

// Run calls fn with a T named name, then runs the cleanups; it returns 1 if
// the run failed (Errorf, Fatalf) and 0 otherwise. Another panic is raised
// again after the cleanups.
func Run(name string, fn func(t *T)) (code int) {
	t := &T{name: name}
	defer func() {
		if t.finish(recover()) {
			code = 1
		}
	}()
	fn(t)
	return 0
}

func (t *T) Name() string { return t.name }
func (t *T) Helper()      {}

func (t *T) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func (t *T) Errorf(format string, args ...any) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	t.Logf(format, args...)
}

func (t *T) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	panic(fatal{fmt.Sprintf(format, args...)})
}

func (t *T) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }

func (t *T) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *T) Cleanup(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, fn)
}

func (t *T) TempDir() string {
	dir, err := os.MkdirTemp("", t.name+"-")
	if err != nil {
		t.Fatalf("%s: temp dir: %v", t.name, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// finish runs the cleanups after the run and reports whether it failed;
// recovered is recover()'s value (a Fatalf, or another panic, re-raised
// after the cleanups).
func (t *T) finish(recovered any) (failed bool) {
	if recovered != nil {
		if _, ok := recovered.(fatal); !ok {
			defer panic(recovered)
		}
		t.mu.Lock()
		t.failed = true
		t.mu.Unlock()
	}
	t.mu.Lock()
	fns := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	return t.Failed()
}
