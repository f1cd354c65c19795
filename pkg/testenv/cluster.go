package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pcp/route-processing/pkg/store"
)

// installHint is how a developer provides PostgreSQL to the tests.
const installHint = "provide PostgreSQL for the integration tests: install the server binaries " +
	"(`apt-get install -y postgresql`; initdb and pg_ctl are looked up on PATH and under /usr/lib/postgresql/*/bin), " +
	"or start a Docker daemon, or set TEST_DATABASE_URL=postgres://user:pass@host:5432/postgres?sslmode=disable " +
	"(a role allowed to CREATE DATABASE)"

// PostgresOptions configures a dedicated [PostgresCluster].
type PostgresOptions struct {
	// Fsync keeps PostgreSQL's durability settings (fsync, synchronous_commit,
	// full_page_writes) on, for benchmarks that must pay the real price of a
	// commit. Off by default: tests want speed, and a throwaway cluster
	// has nothing to lose on a crash.
	Fsync bool
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
	bins, err := findPGBinaries()
	if err != nil {
		t.Fatalf("testenv: NewPostgresCluster needs the PostgreSQL server binaries: %v; %s", err, installHint)
	}
	start := time.Now()
	c, err := startCluster(bins, opts)
	if err != nil {
		t.Fatalf("testenv: start PostgreSQL cluster: %v", err)
	}
	t.Cleanup(c.destroy)
	t.Logf("testenv: PostgreSQL cluster on 127.0.0.1:%d ready in %s", c.port, time.Since(start).Round(time.Millisecond))
	return c
}

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

// CreateDatabase creates database name (migrated with store.Migrate when
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
		if err := store.MigrateURL(ctx, u); err != nil {
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

func startCluster(bins *pgBinaries, opts PostgresOptions) (*PostgresCluster, error) {
	dir, err := os.MkdirTemp("", "testenv-pg-")
	if err != nil {
		return nil, err
	}
	c := &PostgresCluster{
		bins:    bins,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logFile: filepath.Join(dir, "postgres.log"),
	}
	// Registered before anything is started, so a crash at any later point
	// still removes the directory (and stops the server once it runs).
	c.unreap = reapOnCrash(
		reapStep{Exec: bins.command("pg_ctl", "-D", c.dataDir, "stop", "-m", "immediate", "-w")},
		reapStep{RemoveAll: dir},
	)
	ok := false
	defer func() {
		if !ok {
			c.destroy()
		}
	}()
	if err := bins.chown(dir); err != nil {
		return nil, err
	}
	if err := bins.initdbInto(c.dataDir); err != nil {
		return nil, err
	}
	c.port, err = freePort()
	if err != nil {
		return nil, err
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
	c.mu.Lock()
	err = c.startLocked()
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ok = true
	return c, nil
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

// pgBinaries are the server programs and the user they run as.
type pgBinaries struct {
	dir string // holds initdb, pg_ctl, postgres
	// runuser is set when this process is root: PostgreSQL refuses to run
	// as root, so the programs run as the postgres user.
	runuser  string
	uid, gid int

	pristineOnce sync.Once
	pristine     string // an initdb'ed data directory, copied for each cluster
	pristineErr  error
}

var pgBins struct {
	once sync.Once
	b    *pgBinaries
	err  error
}

func findPGBinaries() (*pgBinaries, error) {
	pgBins.once.Do(func() { pgBins.b, pgBins.err = lookupPGBinaries() })
	return pgBins.b, pgBins.err
}

func lookupPGBinaries() (*pgBinaries, error) {
	var dir string
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir = filepath.Dir(p)
	} else {
		// Debian/Ubuntu keep the server programs off PATH.
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		matches2, _ := filepath.Glob("/usr/pgsql-*/bin/pg_ctl")
		matches = append(matches, matches2...)
		if len(matches) == 0 {
			return nil, errors.New("pg_ctl not found on PATH nor under /usr/lib/postgresql/*/bin")
		}
		slices.SortFunc(matches, func(a, b string) int { return pgMajor(b) - pgMajor(a) }) // newest first
		dir = filepath.Dir(matches[0])
	}
	for _, prog := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, prog)); err != nil {
			return nil, fmt.Errorf("%s not found next to pg_ctl in %s", prog, dir)
		}
	}
	b := &pgBinaries{dir: dir, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses to: no postgres user to run it as (%w); create one (`useradd -r postgres`) or run the tests as another user", err)
		}
		b.uid, _ = strconv.Atoi(u.Uid)
		b.gid, _ = strconv.Atoi(u.Gid)
		if b.runuser, err = exec.LookPath("runuser"); err != nil {
			return nil, errors.New("running as root: runuser not found (util-linux) to run PostgreSQL as the postgres user")
		}
	}
	return b, nil
}

func pgMajor(path string) int {
	// /usr/lib/postgresql/15/bin/pg_ctl or /usr/pgsql-15/bin/pg_ctl
	d := filepath.Base(filepath.Dir(filepath.Dir(path)))
	d = strings.TrimPrefix(d, "pgsql-")
	n, _ := strconv.Atoi(d)
	return n
}

// command is the argv that runs a server program as the right user.
func (b *pgBinaries) command(prog string, args ...string) []string {
	argv := append([]string{filepath.Join(b.dir, prog)}, args...)
	if b.runuser != "" {
		argv = append([]string{b.runuser, "-u", "postgres", "--"}, argv...)
	}
	return argv
}

func (b *pgBinaries) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := b.command(prog, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = os.TempDir() // the postgres user may not be able to enter the test's directory
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

func (b *pgBinaries) chown(path string) error {
	if b.uid < 0 {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, b.uid, b.gid)
	})
}

// initdbInto creates a data directory at dst. initdb runs once per binary
// (about a second); later clusters copy its result, which takes a tenth of
// that.
func (b *pgBinaries) initdbInto(dst string) error {
	b.pristineOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testenv-pginit-")
		if err != nil {
			b.pristineErr = err
			return
		}
		unreap := reapOnCrash(reapStep{RemoveAll: dir})
		atTeardown(func() { _ = os.RemoveAll(dir); unreap() })
		if err := b.chown(dir); err != nil {
			b.pristineErr = err
			return
		}
		data := filepath.Join(dir, "data")
		out, err := b.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
		if err != nil {
			b.pristineErr = fmt.Errorf("initdb: %w\n%s", err, out)
			return
		}
		b.pristine = data
	})
	if b.pristineErr != nil {
		return b.pristineErr
	}
	// cp -a keeps the owner (postgres) and the 0700 mode PostgreSQL insists on.
	if out, err := exec.Command("cp", "-a", b.pristine, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy data directory: %w\n%s", err, out)
	}
	return nil
}

// freePort picks a TCP port on 127.0.0.1 that is free now and that this
// process has not handed out before (a stopped cluster keeps its port).
func freePort() (int, error) {
	usedPorts.mu.Lock()
	defer usedPorts.mu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !usedPorts.m[port] {
			usedPorts.m[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port")
}

var usedPorts = struct {
	mu sync.Mutex
	m  map[int]bool
}{m: map[int]bool{}}

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
