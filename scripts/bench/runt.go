package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// runT lets this program use the harness helpers of pkg/e2e and pkg/testenv,
// which take a testing.TB, instead of copying them: Fatalf ends the run
// (a panic that runMain recovers), Cleanup functions run at the end, last
// registered first, Logf prints. Only the main goroutine may call Fatalf.
//
// The embedded testing.TB is nil: it only satisfies the interface's
// unexported method; a helper calling a method not overridden here panics,
// which names the method to add.
type runT struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// fatal is the panic value of Fatalf.
type fatal struct{ msg string }

func newRunT(name string) *runT { return &runT{name: name} }

func (t *runT) Name() string { return t.name }
func (t *runT) Helper()      {}

func (t *runT) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func (t *runT) Errorf(format string, args ...any) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	t.Logf(format, args...)
}

func (t *runT) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	panic(fatal{fmt.Sprintf(format, args...)})
}

func (t *runT) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }

func (t *runT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *runT) Cleanup(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, fn)
}

func (t *runT) TempDir() string {
	dir, err := os.MkdirTemp("", t.name+"-")
	if err != nil {
		t.Fatalf("bench: temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// finish runs the cleanups after the run and reports whether it failed;
// recovered is recover()'s value (a Fatalf, or another panic, re-raised
// after the cleanups).
func (t *runT) finish(recovered any) (failed bool) {
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
