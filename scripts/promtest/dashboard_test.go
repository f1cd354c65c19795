package promtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboardPath is the Grafana dashboard the chart ships.
var dashboardPath = filepath.Join("..", "..", "charts", "pcp-route-processing", "dashboards", "pcp-route-processing.json")

// templateVar is a dashboard variable: its query, and the regex Grafana
// applies to the values the query lists.
type templateVar struct {
	Name       string `json:"name"`
	Definition string `json:"definition"`
	Regex      string `json:"regex"`
}

// panelQuery is one target of one panel.
type panelQuery struct {
	panel, refID, legend, expr string
}

// dashboardQueries returns every query of the dashboard (rows' collapsed
// panels included) with Grafana's variables replaced as Grafana would with
// this test's scrape interval, and the template variables' own queries by
// name.
func dashboardQueries(t *testing.T, ns string) (queries []panelQuery, vars map[string]templateVar) {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []templateVar `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("promtest: dashboard JSON: %v", err)
	}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("promtest: dashboard panel: %v", err)
			}
			for _, tg := range p.Targets {
				queries = append(queries, panelQuery{panel: p.Title, refID: tg.RefID, legend: tg.LegendFormat, expr: substitute(t, tg.Expr, ns)})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	vars = map[string]templateVar{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v
	}
	return queries, vars
}

var leftover = regexp.MustCompile(`\$\{?\w+`)

// release is what the dashboard's $release variable takes from the
// ingestor's job (its regex), and the relay's job ends it too.
var release = strings.TrimSuffix(ingestorJob, "-ingestor")

// substitute replaces the dashboard's variables. $__rate_interval is
// Grafana's max(4 × scrape interval, $__interval): 4s with this test's 1s
// scrapes (with the chart's 30s it is 2m), so a rate always spans at least
// four samples; $__interval is the step (1s); $namespace is the release
// namespace, $release the release's full name, which its jobs (Services)
// end (another release may share the namespace). A variable left over is a query this test cannot run as
// Grafana would, hence an error.
func substitute(t *testing.T, expr, ns string) string {
	t.Helper()
	r := strings.NewReplacer(
		"$__rate_interval", "4s", "${__rate_interval}", "4s",
		"$__interval", "1s", "${__interval}", "1s",
		"$__range", "5m", "${__range}", "5m",
		"$namespace", ns, "${namespace}", ns,
		"$release", release, "${release}", release,
	)
	out := r.Replace(expr)
	if m := leftover.FindString(out); m != "" {
		t.Errorf("promtest: dashboard query uses variable %s, which the test does not know how to substitute: %s", m, expr)
	}
	return out
}

func (q panelQuery) String() string { return fmt.Sprintf("panel %q %s: %s", q.panel, q.refID, q.expr) }
