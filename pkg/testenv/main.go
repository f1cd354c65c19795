package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// MainOption configures [Main].
type MainOption func(*mainConfig)

type mainConfig struct {
	leaks    bool
	leakOpts []goleak.Option
}

// VerifyNoLeaks makes [Main] fail the binary, after every test passed and the
// shared infrastructure was torn down, when goroutines are left running
// (goleak). Pass goleak options to ignore known long-lived goroutines.
func VerifyNoLeaks(opts ...goleak.Option) MainOption {
	return func(c *mainConfig) {
		c.leaks = true
		c.leakOpts = append(c.leakOpts, opts...)
	}
}

var state struct {
	mu        sync.Mutex
	inMain    bool
	teardowns []func()
}

// Main runs the tests and then tears down everything this package started
// for the binary (shared PostgreSQL and Kafka, the template database, the
// devbroker build), whether the tests passed or failed. Use it as the whole
// of TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// A test that panics, a `go test -timeout` or a SIGKILL ends the process
// without running this teardown; the reaper (see the package documentation)
// cleans up in that case.
func Main(m *testing.M, opts ...MainOption) {
	var cfg mainConfig
	for _, o := range opts {
		o(&cfg)
	}
	os.Exit(runMain(m, cfg))
}

func runMain(m *testing.M, cfg mainConfig) int {
	code := func() int {
		defer Open()()
		return m.Run()
	}()
	if code == 0 && cfg.leaks {
		if err := goleak.Find(cfg.leakOpts...); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: goroutines leaked after the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// Open is Main for a program (scripts/devrun, scripts/bench): it lets the
// program use what needs Main's teardown, and returns that teardown (stop
// what is still registered, stop the reaper), to be deferred.
func Open() (teardown func()) {
	state.mu.Lock()
	state.inMain = true
	state.mu.Unlock()
	return teardownAll
}

// atTeardown registers fn to run when Main's tests are done; functions run in
// reverse order of registration.
func atTeardown(fn func()) {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.teardowns = append(state.teardowns, fn)
}

func teardownAll() {
	state.mu.Lock()
	fns := state.teardowns
	state.teardowns = nil
	state.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if r := recover(); r != nil {
					fmt.Fprintf(os.Stderr, "testenv: teardown panicked: %v\n", r)
				}
			}()
			fns[i]()
		}()
	}
	stopReaper()
}

// requireMain fails t unless the binary runs under [Main]: shared
// infrastructure is only torn down by Main, so without it every run would
// lean on the crash reaper.
func requireMain(t testing.TB) {
	t.Helper()
	state.mu.Lock()
	ok := state.inMain
	state.mu.Unlock()
	if !ok {
		t.Fatal("testenv: this test binary has no testenv TestMain; add\n\tfunc TestMain(m *testing.M) { testenv.Main(m) }\nto a _test.go file of the package")
	}
}
