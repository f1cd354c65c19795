package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/pcp/route-processing/pkg/shutdown"
)

// A main package's tests call its run function in the test process rather
// than run the binary as a child (pkg/e2e does that): run takes its
// arguments, environment and writers as parameters so that they can, and a
// cancelled context stands for SIGTERM. MainRun is the one home of what each
// such test needs around run: the goroutine, the cancel, the bound on the
// stop, and no run left going when the test fails before it stops it.

// MainRun is a main package's run function running on a goroutine of the
// test, started by [StartMain].
type MainRun struct {
	t      testing.TB
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // run's result, set before done is closed
	hung   bool  // Stop gave up waiting; the cleanup need not wait again
}

// StartMain calls run on a goroutine of its own with a context that
// [MainRun.Stop] cancels; name names it in failures. A test that fails
// before Stop still has run cancelled and waited for at its cleanup, so
// that run does not outlive the test, writing to its buffers or holding its
// database.
func StartMain(t testing.TB, name string, run func(ctx context.Context) error) *MainRun {
	ctx, cancel := context.WithCancel(context.Background())
	m := &MainRun{t: t, name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		m.err = run(ctx)
		close(m.done)
	}()
	t.Cleanup(func() {
		m.cancel()
		if !m.hung && !m.wait() {
			t.Errorf("%s did not stop within %s of the test's end", name, shutdown.Limit)
		}
	})
	return m
}

// Stop cancels run's context, as SIGTERM would, and returns run's error for
// the test to assert. It fails the test if run has not returned within
// [shutdown.Limit]: the contract's bound on a stop holds for the tests too.
func (m *MainRun) Stop() error {
	m.t.Helper()
	m.cancel()
	if !m.wait() {
		m.hung = true
		m.t.Fatalf("%s did not stop within %s of cancellation", m.name, shutdown.Limit)
	}
	return m.err
}

// wait reports whether run returned within shutdown.Limit.
func (m *MainRun) wait() bool {
	select {
	case <-m.done:
		return true
	case <-time.After(shutdown.Limit):
		return false
	}
}
