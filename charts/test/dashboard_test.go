package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDashboardFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "pcp-route-processing.json"))
	require.NoError(t, err)
	requireDashboard(t, raw)
}

// requireDashboard checks that the dashboard is valid JSON and plots what an
// operator needs: ingest and DLQ rates, outbox backlog, FAILED rows and age, publish rate
// and latency, readiness, and what keeps vacuum from keeping the outbox small.
func requireDashboard(t *testing.T, raw []byte) {
	t.Helper()
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash), "dashboard JSON")
	require.NotEmpty(t, dash.Title)
	require.NotEmpty(t, dash.UID, "a stable uid keeps links working across re-imports")

	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has an empty query", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"rate(route_passport_ingest_success_total{",
		"sum by (category) (rate(route_passport_ingest_failure_total{",
		"route_passport_outbox_pending{",
		"route_passport_outbox_failed_rows{",
		"route_passport_outbox_oldest_pending_age_seconds{",
		"rate(route_passport_outbox_published_total{",
		"route_passport_outbox_publish_duration_seconds_bucket{",
		"route_passport_outbox_ingest_to_publish_seconds_bucket{",
		"route_passport_ingest_ready{",
		"route_passport_outbox_relay_ready{",
		"route_passport_db_oldest_xact_age_seconds{",
		"route_passport_outbox_dead_tuples{",
		"route_passport_outbox_live_tuples{",
		"route_passport_outbox_table_bytes{",
		"route_passport_outbox_index_bytes{",
		"route_passport_outbox_index_rebuilds_total{",
	} {
		require.Contains(t, all, want, "dashboard must plot %s", want)
	}
}
