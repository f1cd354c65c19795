package promtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readyPanels are the dashboard's stat panels that count ready pods, with
// the gauge each reads and the job and components its pods report it with:
// one series per dependency (pkg/ingest's and pkg/relay's Component*
// constants), not one per pod.
var readyPanels = []struct {
	title, metric, job string
	components         []string
}{
	{"Ingestor ready pods", "route_passport_ingest_ready", ingestorJob, []string{"postgres", "kafka", "dlq"}},
	{"Relay ready pods", "route_passport_outbox_relay_ready", relayJob, []string{"postgres", "kafka"}},
}

// readySteps are the instants at which TestDashboardReadyPodsPromtool
// evaluates a panel, what the two pods report then, and what the panel must
// show: pods whose every component is 1, out of the pods scraped.
var readySteps = []struct {
	at, state   string
	ready, pods float64
}{
	{"2m", "every dependency up on both pods", 2, 2},
	{"7m", "postgres down on both pods, the other dependencies up", 0, 2},
	{"12m", "postgres back on pod -a only", 1, 2},
}

// TestDashboardReadyPodsPromtool evaluates the "ready" and "pods" queries of
// the panels that count ready pods, read from the shipped dashboard, with
// `promtool test rules` over two pods of the release's namespace (each
// reporting the gauge once per dependency), one fully ready pod of another
// namespace and one of another release in the same namespace: the panel shows pods, not series, so postgres down on both pods
// is "0 ready / 2 pods". promtool is required (Debian package prometheus):
// never a silent skip.
func TestDashboardReadyPodsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtest: no promtool on PATH: apt-get install prometheus (.ci/run does)")
	}
	queries, _ := dashboardQueries(t, namespace)
	for _, p := range readyPanels {
		t.Run(strings.ReplaceAll(p.title, " ", "_"), func(t *testing.T) {
			exprs := map[string]string{} // legend -> query
			for _, q := range queries {
				if q.panel == p.title {
					exprs[q.legend] = q.expr
				}
			}
			if len(exprs) != 2 || exprs["ready"] == "" || exprs["pods"] == "" {
				t.Fatalf("promtest: dashboard panel %q should have two queries, legends \"ready\" and \"pods\"; it has %v (update this test if that is meant)", p.title, exprs)
			}

			var series []map[string]string
			add := func(ns, job, pod, component, values string) {
				series = append(series, map[string]string{
					"series": fmt.Sprintf("%s{namespace=%q, job=%q, pod=%q, component=%q}", p.metric, ns, job, pod, component),
					"values": values,
				})
			}
			for _, c := range p.components {
				a, b := "1x14", "1x14"
				if c == "postgres" { // minutes 5-9 down on both, then back on -a
					a, b = "1x4 0x4 1x5", "1x4 0x4 0x5"
				}
				add(namespace, p.job, p.job+"-a", c, a)
				add(namespace, p.job, p.job+"-b", c, b)
				add("other", p.job, p.job+"-x", c, "1x14")                         // another namespace's pod is not ours
				add(namespace, "staging-"+p.job, "staging-"+p.job+"-y", c, "1x14") // nor another release's in ours
			}
			var exprTests []map[string]any
			var want []string
			for _, s := range readySteps {
				for _, e := range []struct {
					legend string
					value  float64
				}{{"ready", s.ready}, {"pods", s.pods}} {
					exprTests = append(exprTests, map[string]any{
						"expr":        exprs[e.legend],
						"eval_time":   s.at,
						"exp_samples": []map[string]any{{"labels": "{}", "value": e.value}},
					})
				}
				want = append(want, fmt.Sprintf("at %s, %s: ready=%g pods=%g", s.at, s.state, s.ready, s.pods))
			}
			// JSON is YAML: promtool reads it as is.
			file, err := json.MarshalIndent(map[string]any{
				"evaluation_interval": "1m",
				"tests": []map[string]any{{
					"name":             p.title,
					"interval":         "1m",
					"input_series":     series,
					"promql_expr_test": exprTests,
				}},
			}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "ready_test.yaml"), file, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(promtool, "test", "rules", "ready_test.yaml")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("promtest: dashboard panel %q does not count pods (%s has one series per dependency and pod); expected:\n  %s\npromtool test rules: %v\n%s",
					p.title, p.metric, strings.Join(want, "\n  "), err, out)
			}
		})
	}
}
