// Command devrun is `make run` (after `make build`): the whole service on one
// machine, without Docker, on pkg/testenv's infrastructure.
//
//  1. PostgreSQL: DATABASE_URL when set; else a throwaway local cluster
//     (testenv: initdb/pg_ctl from PATH or /usr/lib/postgresql/*/bin, run as
//     the postgres user when root) on 127.0.0.1:55432 or the next free port,
//     with a fresh pcp_route_processing database, removed at the end: every
//     run starts from the same empty state as the new dev broker.
//  2. Kafka: KAFKA_BOOTSTRAP_SERVERS when set; else scripts/devbroker (an
//     in-memory kfake broker) on 127.0.0.1:59092 or the next free port, with
//     the four topics, 3 partitions each.
//  3. bin/ingestor migrate, then bin/ingestor and bin/outbox-relay, logs
//     prefixed [ingestor] / [relay] and kept in .dev/run/.
//  4. Waits for both /readyz, sends testdata/contract and testdata/samples
//     with scripts/devwatch produce, and prints every output event and
//     dead-lettered record with scripts/devwatch watch ([watch]), then the
//     tables.
//  5. Runs until Ctrl-C (or RUN_SECONDS / --for N seconds after the samples
//     were sent), then stops everything it started, in order, and reaps it.
//     Every child leads a process group of its own (a Ctrl-C reaches only
//     this program) and is registered with testenv's crash reaper, so even a
//     SIGKILL of this program leaves nothing running.
//
// Usage: go run ./scripts/devrun [--for SECONDS]
// Environment: DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS, RUN_SECONDS,
// READY_TIMEOUT (seconds, default 90), NO_COLOR, any variable of
// docs/contract.md §5 (passed through to both binaries).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	svcconfig "github.com/pcp/route-processing/pkg/config"
	"github.com/pcp/route-processing/pkg/testenv"
)

const dbName = "pcp_route_processing"

// exitError carries the status the program ends with.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	os.Exit(run())
}

func run() int {
	con := newConsole()
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "devrun: %v\n", err)
		return 2
	}
	defer testenv.Open()()
	r := &runner{con: con, cfg: cfg}
	sigs := make(chan os.Signal, 4)
	// SIGPIPE too: a closed output pipe (make run | head) must fail writes,
	// not kill the program before it has stopped its children.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		for s := range sigs {
			name, code := map[os.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP"}[s], 128+int(s.(syscall.Signal))
			if name == "" {
				continue // SIGPIPE
			}
			cancel(&exitError{code: code, msg: name + " received"})
		}
	}()
	go watchParent(ctx, cancel)

	err = r.run(ctx)
	if cause := context.Cause(ctx); err != nil && cause != nil {
		err = cause // a signal, whatever it interrupted (a build, a wait)
	}
	code := 0
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if code >= 128 {
			con.write("\n")
			con.say("%s", ee.msg)
		} else {
			con.errorf("%s", ee.msg)
		}
	case err != nil:
		code = 1
		con.errorf("%v", err)
	}
	// A second Ctrl-C must not leave half of it running: finish the stop.
	r.stopAll()
	return code
}

// watchParent notices that make went away (make's SIGTERM reaches only the
// recipe's shell, and this program is re-parented) and stops as on SIGTERM.
func watchParent(ctx context.Context, cancel context.CancelCauseFunc) {
	parent := os.Getppid()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if os.Getppid() != parent {
			cancel(&exitError{code: 143, msg: "the parent process (make) went away"})
			return
		}
	}
}

type config struct {
	runFor       time.Duration
	readyTimeout time.Duration
	topics       topics
	databaseURL  string // given by the user
	bootstrap    string // given by the user
}

type topics struct{ input, dlq, processedRoute, routeGeoref string }

func (t topics) list() []string { return []string{t.input, t.dlq, t.processedRoute, t.routeGeoref} }

func parseConfig(args []string) (config, error) {
	fs := flag.NewFlagSet("devrun", flag.ContinueOnError)
	runSeconds := fs.String("for", os.Getenv("RUN_SECONDS"), "stop by itself this many seconds after the samples were sent (RUN_SECONDS; 0: run until Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	secs, err := wholeSeconds("RUN_SECONDS / --for", *runSeconds, 0)
	if err != nil {
		return config{}, err
	}
	ready, err := wholeSeconds("READY_TIMEOUT", os.Getenv("READY_TIMEOUT"), 90)
	if err != nil {
		return config{}, err
	}
	return config{
		runFor:       time.Duration(secs) * time.Second,
		readyTimeout: time.Duration(ready) * time.Second,
		topics: topics{
			input:          envOr("TOPIC_INPUT", svcconfig.DefaultTopicInput),
			dlq:            envOr("TOPIC_INPUT_DLQ", svcconfig.DefaultTopicInputDLQ),
			processedRoute: envOr("TOPIC_PROCESSED_ROUTE", svcconfig.DefaultTopicProcessedRoute),
			routeGeoref:    envOr("TOPIC_ROUTE_GEOREFERENCE", svcconfig.DefaultTopicRouteGeoreference),
		},
		databaseURL: os.Getenv("DATABASE_URL"),
		bootstrap:   os.Getenv("KAFKA_BOOTSTRAP_SERVERS"),
	}, nil
}

func wholeSeconds(name, v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a whole number of seconds, not %q", name, v)
	}
	return n, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// freePortFrom is the first port from first on that nobody listens on.
func freePortFrom(first int) (int, error) {
	for p := first; p < first+100; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			ln.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port in %d..%d", first, first+99)
}

// child is a program this run started, with its prefixed output.
type child struct {
	name string
	proc *testenv.Process
	out  *prefixer
}

// start starts a program with env, its output prefixed on the console and
// kept in .dev/run/NAME.log.
func (r *runner) start(name, path string, env []string, args ...string) (*child, error) {
	logf, err := os.Create(filepath.Join(runDir, name+".log"))
	if err != nil {
		return nil, err
	}
	out := r.con.prefixer(name, logf)
	proc, err := testenv.StartProcess(testenv.ProcessSpec{Name: name, Path: path, Args: args, Env: env, Output: out})
	if err != nil {
		out.Close()
		return nil, err
	}
	c := &child{name: name, proc: proc, out: out}
	r.children = append(r.children, c)
	return c, nil
}

// runOnce runs a program to completion, its output prefixed on the console.
func (r *runner) runOnce(ctx context.Context, name, path string, env []string, args ...string) error {
	out := r.con.prefixer(name, nil)
	defer out.Close()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w", filepath.Base(path), args, err)
	}
	return nil
}

// stopAll stops what this run started: the watcher first, then the two
// services together (they finish in-flight work within 30 s by contract),
// then the broker they talk to, then PostgreSQL.
func (r *runner) stopAll() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if len(r.children) == 0 && r.pg == nil && r.broker == nil {
		return
	}
	r.con.say("stopping everything this run started")
	stop := func(cs []*child, grace time.Duration) {
		done := make(chan struct{}, len(cs))
		for _, c := range cs {
			go func() {
				start := time.Now()
				err := c.proc.Stop(grace)
				if errors.Is(err, testenv.ErrKilled) {
					r.con.warn("%v", err)
				}
				c.out.Close()
				r.con.note("stopped %s (exit %d, took %.1fs)", c.name, c.proc.ExitCode(), time.Since(start).Seconds())
				done <- struct{}{}
			}()
		}
		for range cs {
			<-done
		}
	}
	var watch, services []*child
	for _, c := range r.children {
		if c.name == "watch" {
			watch = append(watch, c)
		} else {
			services = append(services, c)
		}
	}
	stop(watch, 5*time.Second)
	stop(services, 35*time.Second)
	if r.broker != nil {
		start := time.Now()
		err := r.broker.Close()
		r.brokerOut.Close()
		r.con.note("stopped broker (%s, took %.1fs)", errText(err), time.Since(start).Seconds())
	}
	if r.pg != nil {
		start := time.Now()
		copyFile(r.pg.LogFile(), filepath.Join(runDir, "postgres.log"))
		err := r.pg.Close()
		r.con.note("stopped postgres (pg_ctl stop -m fast, %s, took %.1fs)", errText(err), time.Since(start).Seconds())
	}
	r.con.say("all stopped; logs of this run are in .dev/run/")
}

func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func copyFile(src, dst string) {
	if b, err := os.ReadFile(src); err == nil {
		_ = os.WriteFile(dst, b, 0o644)
	}
}
