package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// seriesType matches the "# TYPE" line Prometheus' text exposition writes once
// per metric family.
var seriesType = regexp.MustCompile(`(?m)^# TYPE (route_passport_\w+)`)

// RequireMetricsDocumented fails t when a route_passport_* family of the
// exposition (a /metrics body) is not named, in backquotes, in the README.md at
// the module root: operators look series up in its Metrics table, and a series
// added without a row there is one nobody alerts on.
func RequireMetricsDocumented(t testing.TB, exposition string) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(ModuleRoot(t), "README.md"))
	if err != nil {
		t.Fatalf("read README.md: %v", err)
	}
	families := seriesType.FindAllStringSubmatch(exposition, -1)
	if len(families) == 0 {
		t.Fatalf("no route_passport_* series in the exposition (%d bytes)", len(exposition))
	}
	for _, m := range families {
		if !strings.Contains(string(readme), "`"+m[1]+"`") {
			t.Errorf("README.md, Metrics: %s is not documented", m[1])
		}
	}
}

// ModuleRoot is the directory of the go.mod above the test's working
// directory (a package directory of this module).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory")
		}
		dir = parent
	}
}
