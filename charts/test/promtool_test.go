package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// promtoolTests is the promtool unit test file scripts/chart-check.sh runs
// against the rendered rules.
var promtoolTests = filepath.Join("promtool", "alerts_test.yaml")

// pausedPromtoolTests are promtool unit tests for the rules rendered with
// ci/paused-values.yaml; TestPausedRelayAlertsPromtool runs them.
var pausedPromtoolTests = filepath.Join("promtool", "paused", "alerts_test.yaml")

// TestEveryAlertHasPromtoolTest fails when an alert of the chart has no
// promtool case where it fires (with its labels and annotations, the
// namespace and job among them) and none where it stays silent, or when the
// file tests an alert the chart no longer has. promtool itself runs in scripts/chart-check.sh.
func TestEveryAlertHasPromtoolTest(t *testing.T) {
	t.Parallel()
	r := render(t, "-f", ciValues("all-features"))
	pr := r.custom["PrometheusRule"][fullname]
	require.NotNil(t, pr)
	alerts := map[string]bool{}
	groups, _ := customField(t, pr, "spec", "groups").([]any)
	for _, g := range groups {
		rules, _ := customField(t, g, "rules").([]any)
		for _, rule := range rules {
			if a, ok := customField(t, rule, "alert").(string); ok {
				alerts[a] = true
			}
		}
	}
	require.NotEmpty(t, alerts)

	raw, err := os.ReadFile(promtoolTests)
	require.NoError(t, err)
	var file struct {
		Tests []struct {
			Name      string `json:"name"`
			RuleTests []struct {
				Alert     string `json:"alertname"`
				ExpAlerts []struct {
					Labels      map[string]string `json:"exp_labels"`
					Annotations map[string]string `json:"exp_annotations"`
				} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file), promtoolTests)

	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, rt := range tc.RuleTests {
			require.True(t, alerts[rt.Alert], "%s (test %q) tests alert %q, which the chart does not have", promtoolTests, tc.Name, rt.Alert)
			if len(rt.ExpAlerts) == 0 {
				silent[rt.Alert] = true
				continue
			}
			for _, e := range rt.ExpAlerts {
				require.NotEmpty(t, e.Labels["severity"], "test %q: expected alert %s without its severity label", tc.Name, rt.Alert)
				require.NotEmpty(t, e.Annotations["summary"], "test %q: expected alert %s without its summary", tc.Name, rt.Alert)
				require.NotEmpty(t, e.Annotations["description"], "test %q: expected alert %s without its description", tc.Name, rt.Alert)
				// Two releases' alerts of one name are told apart by these
				// (Alertmanager would merge them, and one silence covers both).
				require.NotEmpty(t, e.Labels["namespace"], "test %q: expected alert %s without its namespace label", tc.Name, rt.Alert)
				require.NotEmpty(t, e.Labels["job"], "test %q: expected alert %s without its job label", tc.Name, rt.Alert)
			}
			fires[rt.Alert] = true
		}
	}
	var missing []string
	for a := range alerts {
		if !fires[a] {
			missing = append(missing, a+" (no case where it fires)")
		}
		if !silent[a] {
			missing = append(missing, a+" (no case where it stays silent)")
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "alerts without promtool tests in %s", promtoolTests)
}

// TestPausedRelayAlertsPromtool runs promtool's unit tests in
// promtool/paused against the PrometheusRule rendered with
// ci/paused-values.yaml: with relay.paused=true the relay has no pods, so the
// only relay alert that can fire is PcpOutboxRelayAbsent, after relayPausedFor
// (30m) rather than notReadyFor, as a warning. promtool is required, as it is
// by scripts/chart-check.sh (Debian package prometheus): never a silent skip.
func TestPausedRelayAlertsPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "no promtool on PATH (apt-get install prometheus)")

	r := render(t, "-f", ciValues("paused"))
	pr := r.custom["PrometheusRule"][fullname]
	require.NotNil(t, pr, "ci/paused-values.yaml enables the PrometheusRule")
	rules, err := yaml.Marshal(map[string]any{"groups": customField(t, pr, "spec", "groups")})
	require.NoError(t, err)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644))
	tests, err := os.ReadFile(pausedPromtoolTests)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644))
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s\nrules:\n%s", args, out, rules)
	}
}
