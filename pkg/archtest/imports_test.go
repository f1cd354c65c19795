package archtest

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pcp/route-processing/"

type pkgInfo struct {
	ImportPath string
	Imports    []string // non-test imports
	Deps       []string // every package the non-test build links
}

func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v (go must be on PATH)", err)
	}
	pkgs := map[string]pkgInfo{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = p
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; is the test running inside the module?", len(pkgs))
	}
	return pkgs
}

func hasPrefix(list []string, prefix string) (string, bool) {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return s, true
		}
	}
	return "", false
}

const (
	confluent = "github.com/confluentinc/confluent-kafka-go"
	pgx       = "github.com/jackc/pgx"
)

// TestOnlyTheirDoorsImportTheClients: kafkax is the only door to Kafka and
// store the only door to PostgreSQL in the service's code; test
// infrastructure (testenv, relaytest) and the programs under scripts/ may
// talk to both directly.
func TestOnlyTheirDoorsImportTheClients(t *testing.T) {
	allowed := map[string][]string{
		confluent: {"pkg/kafkax", "pkg/testenv"},
		pgx:       {"pkg/store", "pkg/testenv", "pkg/relay/relaytest"},
	}
	for name, p := range listPackages(t) {
		if strings.HasPrefix(name, "scripts/") {
			continue
		}
		for client, who := range allowed {
			if imp, ok := hasPrefix(p.Imports, client); ok && !slices.Contains(who, name) {
				t.Errorf("%s imports %s: only %v may", name, imp, who)
			}
		}
	}
}

// TestDomainAndLoopsBuildWithoutTheClients: the model, the domain and the
// two loops link neither client library (so they build without cgo and test
// without infrastructure); ingest reaches PostgreSQL through store's
// interfaces and error classification only, never by importing pgx itself.
func TestDomainAndLoopsBuildWithoutTheClients(t *testing.T) {
	pkgs := listPackages(t)
	for _, name := range []string{"pkg/record", "pkg/outbox", "pkg/backoff", "pkg/dlq", "pkg/dlqreplay", "pkg/passport", "pkg/relay", "pkg/tracing", "pkg/contractschema"} {
		p, ok := pkgs[name]
		if !ok {
			t.Errorf("package %s is gone: update the README and this test", name)
			continue
		}
		for _, client := range []string{confluent, pgx} {
			if dep, ok := hasPrefix(p.Deps, client); ok {
				t.Errorf("%s links %s", name, dep)
			}
		}
	}
	ing := pkgs["pkg/ingest"]
	if dep, ok := hasPrefix(ing.Deps, confluent); ok {
		t.Errorf("pkg/ingest links %s", dep)
	}
	if imp, ok := hasPrefix(ing.Imports, pgx); ok {
		t.Errorf("pkg/ingest imports %s directly", imp)
	}
	for _, name := range []string{"pkg/ingest", "pkg/relay", "pkg/store", "pkg/kafkax"} {
		for _, other := range []string{"pkg/ingest", "pkg/relay"} {
			if name != other && slices.Contains(pkgs[name].Imports, module+other) {
				t.Errorf("%s imports %s: the two loops share only the database and the leaf packages", name, other)
			}
		}
	}
}

// TestLeavesStayLeaves: record and outbox are the plain shared types; they
// import nothing of the module but each other and jsontext, the JSON
// appender.
func TestLeavesStayLeaves(t *testing.T) {
	pkgs := listPackages(t)
	for name, may := range map[string][]string{
		"pkg/record":   nil,
		"pkg/outbox":   {"pkg/record", "pkg/jsontext"},
		"pkg/jsontext": nil,
		"pkg/backoff":  nil,
		"pkg/dlq":      {"pkg/record"},
	} {
		for _, imp := range pkgs[name].Imports {
			if rest, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(may, rest) {
				t.Errorf("%s imports %s; it may import only %v of the module", name, rest, may)
			}
		}
	}
}
