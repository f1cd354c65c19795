package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/store"
)

// installHint is how a developer provides PostgreSQL to the tests.
const installHint = "provide PostgreSQL for the integration tests: install the server binaries " +
	"(`apt-get install -y postgresql`; initdb and pg_ctl are looked up on PATH, under /usr/lib/postgresql/*/bin and /usr/pgsql-*/bin), " +
	"or start a Docker daemon, or set TEST_DATABASE_URL=postgres://user:pass@host:5432/postgres?sslmode=disable " +
	"(a role allowed to CREATE DATABASE)"

// PostgresOptions configures a dedicated [PostgresCluster].
type PostgresOptions struct {
	// Fsync keeps PostgreSQL's durability settings (fsync, synchronous_commit,
	// full_page_writes) on, for benchmarks that must pay the real price of a
	// commit. Off by default: tests want speed, and a throwaway cluster
	// has nothing to lose on a crash.
	Fsync bool
	// Port to listen on (default: a free one).
	Port int
	// Settings are extra postgresql.conf settings, name to value (values
	// are written as given, so quote strings: `'on'`).
	Settings map[string]string
}

// PostgresCluster is a throwaway PostgreSQL cluster run from the local server
// binaries, in a temporary directory, listening on 127.0.0.1 on a port of its
// own and on a unix socket in that directory. It is removed when the test (or,
// for the shared cluster, the binary) ends.
type PostgresCluster struct {
	bins    *pgBinaries
	dir     string // temporary root, removed at the end; also the socket directory
	dataDir string
	logFile string
	port    int

	mu      sync.Mutex
	running bool
	unreap  func()
}

// NewPostgresCluster starts a dedicated cluster for t, stopped and removed at
// t's cleanup. Tests that stop or pause the database use one, so that they
// do not disturb the shared server. It needs the PostgreSQL server binaries
// (Docker and TEST_DATABASE_URL cannot give a test a server of its own to
// stop).
func NewPostgresCluster(t testing.TB, opts PostgresOptions) *PostgresCluster {
	t.Helper()
	requireMain(t)
	start := time.Now()
	c, err := StartPostgresCluster(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(c.destroy)
	t.Logf("testenv: PostgreSQL cluster on 127.0.0.1:%d ready in %s", c.port, time.Since(start).Round(time.Millisecond))
	return c
}

// StartPostgresCluster is NewPostgresCluster for a program (after [Open]):
// the caller stops and removes the cluster with Close.
func StartPostgresCluster(opts PostgresOptions) (*PostgresCluster, error) {
	bins, err := findPGBinaries()
	if err != nil {
		return nil, fmt.Errorf("a PostgreSQL cluster needs the PostgreSQL server binaries: %w; %s", err, installHint)
	}
	c, err := startCluster(bins, opts)
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL cluster: %w", err)
	}
	return c, nil
}

// Close stops the cluster (`pg_ctl stop -m fast`, immediate if that fails)
// and removes its directory.
func (c *PostgresCluster) Close() error {
	err := c.stop("fast")
	c.destroy()
	if err != nil {
		return fmt.Errorf("stop PostgreSQL: %w", err)
	}
	return nil
}

// BinDir is the directory of the PostgreSQL programs the cluster runs
// (psql is usually there too).
func (c *PostgresCluster) BinDir() string { return c.bins.dir }

// Alive reports whether the postmaster of postmaster.pid still runs (a
// supervisor's check: pg_ctl start detaches it from this process).
func (c *PostgresCluster) Alive() bool {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return err == nil && pid > 0 && syscall.Kill(pid, 0) == nil
}

// LogFile is the server's log (inside Dir).
func (c *PostgresCluster) LogFile() string { return c.logFile }

// Dir is the cluster's temporary directory (data directory, log, unix
// socket); it is removed when the cluster is.
func (c *PostgresCluster) Dir() string { return c.dir }

// Port is the TCP port the cluster listens on (on 127.0.0.1).
func (c *PostgresCluster) Port() int { return c.port }

// URL returns a connection URL for dbname as the superuser postgres (trust
// authentication, no password).
func (c *PostgresCluster) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates database name (migrated with store.MigrateURL when
// migrated is true) and returns its URL. The database lives as long as the
// cluster.
func (c *PostgresCluster) CreateDatabase(t testing.TB, name string, migrated bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("testenv: connect to cluster: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	u := c.URL(name)
	if migrated {
		if _, err := store.MigrateURL(ctx, u, nil); err != nil {
			t.Fatalf("testenv: migrate database %s: %v", name, err)
		}
	}
	return u
}

// Stop shuts the cluster down (`pg_ctl stop -m fast`): connections are
// closed, new ones are refused. The data directory and the port number stay
// for Start. (The port is not held while stopped — nothing in this package
// hands it out again, but another program could take it.)
func (c *PostgresCluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.stop("fast"); err != nil {
		t.Fatalf("testenv: stop PostgreSQL: %v", err)
	}
}

// Start starts a stopped cluster again, with the same data and port.
func (c *PostgresCluster) Start(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return
	}
	if err := c.startLocked(); err != nil {
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
}

// newClusterDir makes the directory of a cluster not yet started (data,
// log, socket), owned by the server's user, and registers its removal with
// the reaper before anything runs, so a crash at any later point still
// removes it (and stops the server once it runs). The caller destroys the
// cluster if it fails to start it.
func newClusterDir(bins *pgBinaries, prefix string) (*PostgresCluster, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	c := &PostgresCluster{
		bins:    bins,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logFile: filepath.Join(dir, "postgres.log"),
	}
	c.unreap = reapOnCrash(
		reapStep{Exec: bins.command("pg_ctl", "-D", c.dataDir, "stop", "-m", "immediate", "-w")},
		reapStep{RemoveAll: dir},
	)
	if err := bins.chown(dir); err != nil {
		c.destroy()
		return nil, err
	}
	return c, nil
}

func startCluster(bins *pgBinaries, opts PostgresOptions) (*PostgresCluster, error) {
	c, err := newClusterDir(bins, "testenv-pg-")
	if err != nil {
		return nil, err
	}
	dir := c.dir
	ok := false
	defer func() {
		if !ok {
			c.destroy()
		}
	}()
	if err := bins.initdbInto(c.dataDir); err != nil {
		return nil, err
	}
	c.port = opts.Port
	if c.port == 0 {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
	}
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": "'" + dir + "'",
		"max_connections":         "300",
		"shared_buffers":          "'128MB'",
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
	}
	if opts.Fsync {
		settings["fsync"], settings["synchronous_commit"], settings["full_page_writes"] = "on", "on", "on"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	if err := appendConf(filepath.Join(c.dataDir, "postgresql.conf"), settings); err != nil {
		return nil, err
	}
	start := c.start
	if opts.Port == 0 {
		start = c.startOnFreePort
	}
	if err := start(); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startOnFreePort starts a cluster being built on the port freePort gave
// it, or on another when that one was taken meanwhile: the port was free
// when picked, but another process may bind it before the server does
// (see freePort; seen in make test: "could not bind IPv4 address
// "127.0.0.1": Address already in use").
func (c *PostgresCluster) startOnFreePort() error {
	for attempt := 1; ; attempt++ {
		logged := logSize(c.logFile)
		err := c.start()
		if err == nil || attempt == 3 || !strings.Contains(c.logSince(logged), "Address already in use") {
			return err
		}
		if c.port, err = freePort(); err != nil {
			return err
		}
		// A later line of postgresql.conf wins.
		if err := appendConf(filepath.Join(c.dataDir, "postgresql.conf"), map[string]string{"port": strconv.Itoa(c.port)}); err != nil {
			return err
		}
	}
}

// logSize is the size of the server log (0 before the first start).
func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince is what the server logged after the log had size off.
func (c *PostgresCluster) logSince(off int64) string {
	b, _ := os.ReadFile(c.logFile)
	if off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// start starts the server of a cluster being built.
func (c *PostgresCluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startLocked()
}

func appendConf(path string, settings map[string]string) error {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("\n# testenv\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c *PostgresCluster) startLocked() error {
	// -l sends the postmaster's output to a file: a server holding `go
	// test`'s stdout pipe would keep it waiting.
	if out, err := c.bins.run("pg_ctl", "-D", c.dataDir, "-l", c.logFile, "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, c.logTail())
	}
	c.running = true
	return nil
}

func (c *PostgresCluster) stop(mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil
	}
	if out, err := c.bins.run("pg_ctl", "-D", c.dataDir, "-m", mode, "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	c.running = false
	return nil
}

// destroy stops the server and removes its directory.
func (c *PostgresCluster) destroy() {
	if err := c.stop("immediate"); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
	}
	_ = os.RemoveAll(c.dir)
	c.unreap()
}

func (c *PostgresCluster) logTail() string {
	b, _ := os.ReadFile(c.logFile)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Addr is the cluster's TCP address, "127.0.0.1:port" (e.g. the upstream of
// a [FaultProxy]).
func (c *PostgresCluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// URLAt is [PostgresCluster.URL] for dbname at another address that leads
// to this cluster (a [FaultProxy]).
func (c *PostgresCluster) URLAt(addr, dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     addr,
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}
