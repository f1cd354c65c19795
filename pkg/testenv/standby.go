package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicatedCluster is a primary PostgreSQL cluster with one synchronous
// streaming standby (pg_basebackup -R), for failover tests: a commit returns
// only once the standby has the WAL (synchronous_standby_names = '*',
// synchronous_commit = on), so nothing acknowledged is lost when the primary
// is killed and the standby promoted.
type ReplicatedCluster struct {
	Primary, Standby *PostgresCluster
}

// NewReplicatedCluster starts the pair; both are stopped and removed at t's
// cleanup. opts apply to the primary (the standby copies its configuration);
// durability on the primary's own disk stays off unless opts.Fsync, which
// does not weaken the guarantee tested here: a commit is on the standby.
func NewReplicatedCluster(t testing.TB, opts PostgresOptions) *ReplicatedCluster {
	t.Helper()
	requireMain(t)
	bins, err := findPGBinaries()
	if err != nil {
		t.Fatalf("testenv: NewReplicatedCluster needs the PostgreSQL server binaries: %v; %s", err, installHint)
	}
	if _, err := os.Stat(filepath.Join(bins.dir, "pg_basebackup")); err != nil {
		t.Fatalf("testenv: NewReplicatedCluster: no pg_basebackup in %s (it comes with the server binaries); %s", bins.dir, installHint)
	}
	start := time.Now()
	popts := opts
	popts.Settings = map[string]string{}
	for k, v := range opts.Settings {
		popts.Settings[k] = v
	}
	popts.Settings["wal_level"] = "replica"
	popts.Settings["max_wal_senders"] = "10"
	popts.Settings["hot_standby"] = "on"
	popts.Settings["synchronous_standby_names"] = "'*'"
	popts.Settings["synchronous_commit"] = "on"
	primary, err := startCluster(bins, popts)
	if err != nil {
		t.Fatalf("testenv: start primary: %v", err)
	}
	t.Cleanup(primary.destroy)
	standby, err := startStandby(bins, primary)
	if err != nil {
		t.Fatalf("testenv: start standby: %v", err)
	}
	t.Cleanup(standby.destroy)
	r := &ReplicatedCluster{Primary: primary, Standby: standby}
	if err := r.waitSync(30 * time.Second); err != nil {
		t.Fatalf("testenv: standby not streaming synchronously: %v\n%s", err, standby.logTail())
	}
	t.Logf("testenv: PostgreSQL primary 127.0.0.1:%d with synchronous standby 127.0.0.1:%d ready in %s",
		primary.port, standby.port, time.Since(start).Round(time.Millisecond))
	return r
}

// startStandby takes a base backup of primary into a new directory, with
// the recovery settings (-R: standby.signal and primary_conninfo), and starts
// it on a port of its own.
func startStandby(bins *pgBinaries, primary *PostgresCluster) (*PostgresCluster, error) {
	c, err := newClusterDir(bins, "testenv-pgstandby-")
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
	if out, err := bins.run("pg_basebackup", "-D", c.dataDir, "-R", "-X", "stream", "--no-sync",
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres"); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w\n%s", err, out)
	}
	if c.port, err = freePort(); err != nil {
		return nil, err
	}
	// The copied postgresql.conf is the primary's; a later line wins.
	if err := appendConf(filepath.Join(c.dataDir, "postgresql.conf"), map[string]string{
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": "'" + dir + "'",
		// Once promoted, it has no standby of its own: a synchronous
		// standby name would make every commit wait forever.
		"synchronous_standby_names": "''",
		"cluster_name":              "'standby'",
	}); err != nil {
		return nil, err
	}
	if err := c.startOnFreePort(); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// waitSync waits until the primary reports a synchronous standby.
func (r *ReplicatedCluster) waitSync(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.Primary.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		var n int
		err := conn.QueryRow(ctx, `select count(*) from pg_stat_replication where sync_state = 'sync' and state = 'streaming'`).Scan(&n)
		if err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no synchronous standby after %s (last error: %v)", timeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is a multi-host URL for dbname (primary first, then the standby) with
// target_session_attrs=read-write: pgx tries the hosts in order and keeps the
// first that accepts writes, so after a failover the same URL finds the
// promoted standby.
func (r *ReplicatedCluster) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     strings.Join([]string{fmt.Sprintf("127.0.0.1:%d", r.Primary.port), fmt.Sprintf("127.0.0.1:%d", r.Standby.port)}, ","),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable&target_session_attrs=read-write",
	}
	return u.String()
}

// CreateDatabase creates (and, when migrated, migrates) database name on the
// primary, waits until the standby has replayed it, and returns
// [ReplicatedCluster.URL] for it.
func (r *ReplicatedCluster) CreateDatabase(t testing.TB, name string, migrated bool) string {
	t.Helper()
	r.Primary.CreateDatabase(t, name, migrated)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, r.Standby.URL(name))
		if err == nil {
			conn.Close(context.Background())
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: database %s not on the standby after 30s: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return r.URL(name)
}

// KillPrimary stops the primary the hard way (`pg_ctl stop -m immediate`:
// every backend is killed, no checkpoint, clients see their connections
// drop), as a crashed host would.
func (r *ReplicatedCluster) KillPrimary(t testing.TB) {
	t.Helper()
	if err := r.Primary.stop("immediate"); err != nil {
		t.Fatalf("testenv: kill primary: %v", err)
	}
}

// Promote promotes the standby (`pg_ctl promote -w`): it returns once the
// standby accepts writes.
func (r *ReplicatedCluster) Promote(t testing.TB) {
	t.Helper()
	if out, err := r.Standby.bins.run("pg_ctl", "-D", r.Standby.dataDir, "-w", "-t", "60", "promote"); err != nil {
		t.Fatalf("testenv: promote standby: %v\n%s\n%s", err, out, r.Standby.logTail())
	}
}

// RestartPrimaryReadOnly starts the killed old primary again with
// default_transaction_read_only = on: what a fenced old primary (or one that
// came back as a standby) looks like to a client that reaches it, a server
// that accepts connections and rejects writes with SQLSTATE 25006. A client
// with target_session_attrs=read-write skips it.
func (r *ReplicatedCluster) RestartPrimaryReadOnly(t testing.TB) {
	t.Helper()
	if err := appendConf(filepath.Join(r.Primary.dataDir, "postgresql.conf"), map[string]string{
		"default_transaction_read_only": "on",
		// Its standby is gone: commits (even of read-only sessions'
		// bookkeeping) must not wait for one.
		"synchronous_standby_names": "''",
	}); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	r.Primary.Start(t)
}
