package store_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pcp/route-processing/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestQueryExecModes runs every other test of this package again, in a child
// process per mode, with the pools in pgx's exec and simple_protocol modes:
// the modes a connection pooler in transaction mode (PgBouncer) needs, where
// no named prepared statement tells pgx the parameters' types. This run is
// the default mode (cache_statement).
func TestQueryExecModes(t *testing.T) {
	if os.Getenv(testenv.EnvQueryExecMode) != "" {
		return // a child run: the parent runs the modes
	}
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			// Not -test.v: the child's output is then the failing tests'
			// alone, which a log cut to its head and tail still shows.
			args := []string{"-test.count=1", "-test.skip=^TestQueryExecModes$"}
			for _, a := range os.Args[1:] {
				if strings.HasPrefix(a, "-test.run=") || strings.HasPrefix(a, "-test.timeout=") {
					args = append(args, a)
				}
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), testenv.EnvQueryExecMode+"="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("store tests in default_query_exec_mode=%s failed: %v\n%s", mode, err, out)
			}
			t.Logf("store tests pass in default_query_exec_mode=%s", mode)
		})
	}
}
