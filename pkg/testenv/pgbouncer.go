package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgbouncerHint is how a developer gets PgBouncer for the tests.
const pgbouncerHint = "install PgBouncer (`apt-get install -y pgbouncer`; looked up on PATH and at /usr/sbin/pgbouncer)"

// PgBouncer is a PgBouncer process of a test's own in front of a
// [PostgresCluster], in transaction pooling mode — the mode in which a
// server connection is lent to a client for one transaction only, so session
// state (SET, LISTEN, named prepared statements, session advisory locks)
// does not survive from one transaction to the next.
type PgBouncer struct {
	port    int
	dir     string
	logFile string
	cmd     *exec.Cmd
	exited  chan error
	unreap  func()
}

// PgBouncerOptions configure [NewPgBouncer].
type PgBouncerOptions struct {
	// PoolSize is default_pool_size: server connections per database and
	// user (default 20).
	PoolSize int
	// RoundRobin hands a client's transactions to the idle server
	// connections in turn (server_round_robin), where PgBouncer's default
	// gives a quiet pool's client the same one again: as a pool busy with
	// other clients does.
	RoundRobin bool
	// ServerLoginRetry is server_login_retry, how long PgBouncer waits
	// before connecting to the server again after a login failed (0:
	// PgBouncer's default, 15 s). PAUSE counts a server connection it
	// closes while that one logs in as a failed login, so a RESUME can
	// wait up to this long before PgBouncer connects again.
	ServerLoginRetry time.Duration
}

// NewPgBouncer starts PgBouncer on a free 127.0.0.1 port in front of c
// (every database of c, user postgres, trust authentication) with
// pool_mode = transaction, and stops it at t's cleanup. The process runs in
// a process group of its own, registered with the reaper.
func NewPgBouncer(t testing.TB, c *PostgresCluster, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	requireMain(t)
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			t.Fatalf("testenv: NewPgBouncer: no pgbouncer program (%v); %s", err, pgbouncerHint)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	start := time.Now()
	// Not t.TempDir: as root, PgBouncer runs as postgres, which cannot
	// enter the test's 0700 temporary directory.
	dir, err := os.MkdirTemp("", "testenv-pgbouncer-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	unreapDir := reapOnCrash(reapStep{RemoveAll: dir})
	t.Cleanup(func() { _ = os.RemoveAll(dir); unreapDir() })
	b := &PgBouncer{dir: dir}
	b.logFile = filepath.Join(b.dir, "pgbouncer.log")
	if b.port, err = freePort(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	poolSize := opts.PoolSize
	if poolSize == 0 {
		poolSize = 20
	}
	// auth_type trust still wants the user listed in auth_file.
	userlist := filepath.Join(b.dir, "userlist.txt")
	conf := filepath.Join(b.dir, "pgbouncer.ini")
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = transaction
default_pool_size = %d
max_client_conn = 1000
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = %s
log_connections = 0
log_disconnections = 0
server_round_robin = %d
`, c.Port(), b.port, userlist, poolSize, b.logFile, map[bool]int{false: 0, true: 1}[opts.RoundRobin])
	if opts.ServerLoginRetry > 0 {
		ini += fmt.Sprintf("server_login_retry = %g\n", opts.ServerLoginRetry.Seconds())
	}
	for path, content := range map[string]string{userlist: `"postgres" ""` + "\n", conf: ini} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	b.cmd = exec.Command(bin, conf)
	b.cmd.Dir = b.dir
	if err := os.Chmod(b.dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root; run it as the user the
		// PostgreSQL clusters run as.
		bins, err := findPGBinaries()
		if err != nil {
			t.Fatalf("testenv: NewPgBouncer as root needs the postgres user: %v", err)
		}
		if err := bins.chown(b.dir); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		b.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(bins.uid), Gid: uint32(bins.gid)}
	}
	out, err := os.Create(filepath.Join(b.dir, "stderr.log"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer out.Close()
	b.cmd.Stdout, b.cmd.Stderr = out, out
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("testenv: start pgbouncer: %v", err)
	}
	b.unreap = reapOnCrash(reapStep{KillGroup: b.cmd.Process.Pid})
	b.exited = make(chan error, 1)
	go func() { b.exited <- b.cmd.Wait() }()
	t.Cleanup(b.stop)
	if err := b.waitReady(30 * time.Second); err != nil {
		t.Fatalf("testenv: pgbouncer not ready: %v\n%s", err, b.LogTail())
	}
	t.Logf("testenv: PgBouncer (pid %d, transaction pooling) on 127.0.0.1:%d in front of 127.0.0.1:%d ready in %s",
		b.cmd.Process.Pid, b.port, c.Port(), time.Since(start).Round(time.Millisecond))
	return b
}

func (b *PgBouncer) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		select {
		case err := <-b.exited:
			b.exited <- err
			return fmt.Errorf("pgbouncer exited: %v", err)
		default:
		}
		conn, err := pgx.Connect(ctx, b.URL("postgres"))
		if err == nil {
			_, err = conn.Exec(ctx, "select 1")
			conn.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %v", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Addr is PgBouncer's address, "127.0.0.1:port".
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// URL is a connection URL for dbname through PgBouncer as postgres, with
// default_query_exec_mode=exec: pgx's documented setting for transaction
// pooling (no named prepared statements; each query is described and
// executed in one round of the extended protocol).
func (b *PgBouncer) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     b.Addr(),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable&default_query_exec_mode=exec",
	}
	return u.String()
}

// LogTail is the end of PgBouncer's log.
func (b *PgBouncer) LogTail() string {
	out, _ := os.ReadFile(b.logFile)
	errOut, _ := os.ReadFile(filepath.Join(b.dir, "stderr.log"))
	out = append(out, errOut...)
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}

func (b *PgBouncer) stop() {
	defer b.unreap()
	_ = b.cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown (SIGINT would wait for clients)
	select {
	case err := <-b.exited:
		b.exited <- err
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
}

// Admin runs command (PAUSE, RESUME, RECONNECT, SHOW POOLS…) on the admin
// console, which speaks the simple query protocol only. PAUSE returns once
// the server connections' queries have finished; ctx bounds the wait.
func (b *PgBouncer) Admin(ctx context.Context, command string) error {
	cfg, err := pgx.ParseConfig(b.URL("pgbouncer"))
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // over URL's exec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pgbouncer admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, command); err != nil {
		return fmt.Errorf("pgbouncer %s: %w", command, err)
	}
	return nil
}
