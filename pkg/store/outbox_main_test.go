package store_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pcp/route-processing/pkg/store"
	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// envExecMode sets pgx's default_query_exec_mode on the pools of the store
// tests (storePool). TestQueryExecModes sets it for its child runs.
const envExecMode = "STORE_TEST_QUERY_EXEC_MODE"

// TestQueryExecModes runs every other test of this package again, in a child
// process per mode, with the pools in pgx's exec and simple_protocol modes:
// the modes a connection pooler in transaction mode (PgBouncer) needs, where
// no named prepared statement tells pgx the parameters' types. This run is
// the default mode (cache_statement).
func TestQueryExecModes(t *testing.T) {
	if os.Getenv(envExecMode) != "" {
		return // a child run: the parent runs the modes
	}
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			args := []string{"-test.count=1", "-test.skip=^TestQueryExecModes$"}
			for _, a := range os.Args[1:] {
				if strings.HasPrefix(a, "-test.run=") || strings.HasPrefix(a, "-test.v=") || strings.HasPrefix(a, "-test.timeout=") {
					args = append(args, a)
				}
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), envExecMode+"="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("store tests in default_query_exec_mode=%s failed: %v\n%s", mode, err, out)
			}
			t.Logf("store tests pass in default_query_exec_mode=%s", mode)
		})
	}
}

// storePool is testenv.Pool with the query exec mode of envExecMode.
func storePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := withExecMode(t, testenv.DatabaseURL(t), os.Getenv(envExecMode))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, u)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func withExecMode(t testing.TB, connURL, mode string) string {
	t.Helper()
	if mode == "" {
		return connURL
	}
	if !strings.HasPrefix(connURL, "postgres://") && !strings.HasPrefix(connURL, "postgresql://") {
		return connURL + " default_query_exec_mode=" + mode
	}
	u, err := url.Parse(connURL)
	if err != nil {
		t.Fatalf("parse test database URL: %v", err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String()
}
