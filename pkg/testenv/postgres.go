package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/pkg/store"
)

// EnvDatabaseURL names the variable that points the tests at an existing
// server (CI's Postgres service). The role must be allowed to CREATE DATABASE;
// the URL's database is used only for maintenance.
const EnvDatabaseURL = "TEST_DATABASE_URL"

// pgServer is the PostgreSQL server shared by the tests of one binary.
type pgServer struct {
	source   string // "TEST_DATABASE_URL", "docker" or "local"
	adminURL string
	admin    *pgxpool.Pool
	template string
}

var sharedPG struct {
	once sync.Once
	srv  *pgServer
	err  error
}

func sharedServer(t testing.TB) *pgServer {
	t.Helper()
	requireMain(t)
	sharedPG.once.Do(func() {
		start := time.Now()
		sharedPG.srv, sharedPG.err = startServer()
		if sharedPG.err == nil {
			t.Logf("testenv: shared PostgreSQL (%s) with migrated template ready in %s",
				sharedPG.srv.source, time.Since(start).Round(time.Millisecond))
		}
	})
	if sharedPG.err != nil {
		t.Fatalf("testenv: %v", sharedPG.err)
	}
	return sharedPG.srv
}

func startServer() (*pgServer, error) {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return newPGServer(EnvDatabaseURL, u)
	}
	if pool := dockerPool(); pool != nil {
		u, err := dockerPostgres(pool)
		if err != nil {
			return nil, fmt.Errorf("postgres in docker: %w", err)
		}
		return newPGServer("docker", u)
	}
	bins, err := findPGBinaries()
	if err != nil {
		return nil, fmt.Errorf("no PostgreSQL: %s not set, no Docker daemon, and no local server binaries (%v); %s", EnvDatabaseURL, err, installHint)
	}
	c, err := startCluster(bins, PostgresOptions{})
	if err != nil {
		return nil, fmt.Errorf("start local PostgreSQL: %w", err)
	}
	atTeardown(c.destroy)
	return newPGServer("local", c.URL("postgres"))
}

func newPGServer(source, adminURL string) (*pgServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: invalid connection string", source)
	}
	cfg.MaxConns = 8
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", source, err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connect to %s: %w", source, err)
	}
	s := &pgServer{source: source, adminURL: adminURL, admin: admin}
	atTeardown(admin.Close)

	// The template is migrated once per binary; every test database is a
	// copy of it, which costs a file copy instead of running migrations.
	s.template = newDBName("tpl")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(s.template)+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("create template database: %w", err)
	}
	atTeardown(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = admin.Exec(ctx, "ALTER DATABASE "+ident(s.template)+" WITH IS_TEMPLATE false")
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(s.template)+" WITH (FORCE)")
	})
	tplURL, err := withDatabase(adminURL, s.template)
	if err != nil {
		return nil, err
	}
	if _, err := store.MigrateURL(ctx, tplURL, nil); err != nil {
		return nil, fmt.Errorf("migrate template database: %w", err)
	}
	// No connections to the template from now on: CREATE DATABASE ...
	// TEMPLATE fails while anyone is connected to it.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident(s.template)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return nil, fmt.Errorf("seal template database: %w", err)
	}
	return s, nil
}

// createDB creates a database (from template, or empty from template0) that
// is dropped at t's cleanup, and returns its URL.
func (s *pgServer) createDB(t testing.TB, template string) string {
	t.Helper()
	name := newDBName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE: a test that leaked a connection must not make the drop fail.
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(s.adminURL, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if u, err = withQueryExecMode(u); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return u
}

// EnvQueryExecMode names the variable that runs every test database
// connection in one of pgx's query execution modes (the URL's
// default_query_exec_mode): `exec` and `simple_protocol` are what a
// transaction-pooling PgBouncer needs, so running a package's tests with each
// shows that none of its queries depends on named prepared statements or
// binary parameter encoding by OID (TESTENV_QUERY_EXEC_MODE=exec go test
// ./pkg/store). It applies to [DatabaseURL], [EmptyDatabaseURL] and [Pool].
const EnvQueryExecMode = "TESTENV_QUERY_EXEC_MODE"

func withQueryExecMode(connURL string) (string, error) {
	mode := os.Getenv(EnvQueryExecMode)
	if mode == "" {
		return connURL, nil
	}
	switch mode {
	case "cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol":
	default:
		return "", fmt.Errorf("%s=%q: want cache_statement, cache_describe, describe_exec, exec or simple_protocol", EnvQueryExecMode, mode)
	}
	if strings.HasPrefix(connURL, "postgres://") || strings.HasPrefix(connURL, "postgresql://") {
		u, err := url.Parse(connURL)
		if err != nil {
			return "", errors.New("invalid database URL")
		}
		q := u.Query()
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return connURL + " default_query_exec_mode=" + mode, nil
}

// DatabaseURL returns a connection URL to a brand-new database of t's own,
// cloned (CREATE DATABASE ... TEMPLATE) from a template database migrated
// once per binary with store.MigrateURL. It is dropped at t's cleanup (WITH
// (FORCE)). Tests may commit freely: nobody else sees the database.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	s := sharedServer(t)
	return s.createDB(t, s.template)
}

// EmptyDatabaseURL returns a connection URL to a new, empty, unmigrated
// database of t's own (from template0), dropped at t's cleanup. For tests of
// the migrations themselves.
func EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	return sharedServer(t).createDB(t, "template0")
}

// Pool returns a pool (store.Open) on DatabaseURL(t), closed at t's cleanup
// before the database is dropped.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := DatabaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, u, "testenv")
	if err != nil {
		t.Fatalf("testenv: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newDBName returns a unique database name that still says which test made
// it (lower case, at most 63 bytes).
func newDBName(hint string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(hint) {
		if b.Len() >= 36 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	return "testenv_" + strings.Trim(b.String(), "_") + "_" + randHex(6)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// withDatabase returns connURL pointed at database name. It accepts URLs and
// key=value connection strings.
func withDatabase(connURL, name string) (string, error) {
	if strings.HasPrefix(connURL, "postgres://") || strings.HasPrefix(connURL, "postgresql://") {
		u, err := url.Parse(connURL)
		if err != nil {
			return "", errors.New("invalid database URL")
		}
		u.Path = "/" + name
		u.RawPath = ""
		q := u.Query()
		q.Del("dbname")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In key=value form a later key wins.
	return connURL + " dbname=" + name, nil
}
