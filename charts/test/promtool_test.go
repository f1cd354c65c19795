package charttest

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// promtoolTests is the promtool unit test file scripts/chart-check.sh runs
// against the rendered rules.
var promtoolTests = filepath.Join("promtool", "alerts_test.yaml")

// TestEveryAlertHasPromtoolTest fails when an alert of the chart has no
// promtool case where it fires (with its labels and annotations) and none
// where it stays silent, or when the file tests an alert the chart no longer
// has. promtool itself runs in scripts/chart-check.sh.
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
