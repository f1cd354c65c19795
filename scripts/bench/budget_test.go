package main

import (
	"math"
	"slices"
	"strings"
	"testing"
)

const fakeExposition = `# HELP route_passport_stage_seconds Latency of one stage.
# TYPE route_passport_stage_seconds histogram
route_passport_stage_seconds_bucket{stage="claimed_to_reported",le="0.001"} 0
route_passport_stage_seconds_bucket{stage="claimed_to_reported",le="0.002"} 50
route_passport_stage_seconds_bucket{stage="claimed_to_reported",le="0.005"} 100
route_passport_stage_seconds_bucket{stage="claimed_to_reported",le="+Inf"} 100
route_passport_stage_seconds_sum{stage="claimed_to_reported"} 0.2
route_passport_stage_seconds_count{stage="claimed_to_reported"} 100
route_passport_stage_seconds_bucket{le="0.01",stage="input_to_fetched"} 10
route_passport_stage_seconds_bucket{le="+Inf",stage="input_to_fetched"} 20
route_passport_stage_seconds_count{stage="input_to_fetched"} 20
route_passport_stage_seconds_bucket{stage="odd \"one\"",le="+Inf"} 3 1700000000000
route_passport_stage_seconds_count{stage="odd \"one\""} 3
route_passport_stage_seconds_other{stage="x"} 1
route_passport_stage_secondsx_bucket{stage="y",le="1"} 1
route_passport_outbox_published_total 5
`

func TestParseStageHistograms(t *testing.T) {
	hs := parseStageHistograms(fakeExposition, stageMetric)
	got := make([]string, 0, len(hs))
	for k := range hs {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"claimed_to_reported", "input_to_fetched", `odd "one"`}
	if !slices.Equal(got, want) {
		t.Fatalf("stages %q, want %q", got, want)
	}
	h := hs["claimed_to_reported"]
	if h.count != 100 || !slices.Equal(h.le[:3], []float64{0.001, 0.002, 0.005}) || !math.IsInf(h.le[3], 1) {
		t.Fatalf("claimed_to_reported parsed as %+v", h)
	}
	// The 50th observation ends the (1 ms, 2 ms] bucket; the 99th is 49/50
	// of the way through (2 ms, 5 ms].
	if q := h.quantile(0.5); math.Abs(q-0.002) > 1e-9 {
		t.Errorf("p50 %v, want 0.002", q)
	}
	if q := h.quantile(0.99); math.Abs(q-(0.002+0.003*49/50)) > 1e-9 {
		t.Errorf("p99 %v, want %v", q, 0.002+0.003*49/50)
	}
	// Past the last finite bound: that bound, as histogram_quantile.
	if q := hs["input_to_fetched"].quantile(0.99); q != 0.01 {
		t.Errorf("p99 in +Inf bucket %v, want 0.01", q)
	}
	if q := hs[`odd "one"`].quantile(0.5); !math.IsNaN(q) {
		t.Errorf("only +Inf bucket: %v, want NaN", q)
	}
}

func TestStageBudgetIsTheDifferenceOfTwoScrapes(t *testing.T) {
	before := map[string]map[string]*histogram{"relay": parseStageHistograms(fakeExposition, stageMetric)}
	later := strings.ReplaceAll(fakeExposition, `le="0.005"} 100`, `le="0.005"} 300`)
	later = strings.ReplaceAll(later, `le="+Inf"} 100`, `le="+Inf"} 300`)
	later = strings.ReplaceAll(later, `{stage="claimed_to_reported"} 100`, `{stage="claimed_to_reported"} 300`)
	after := map[string]map[string]*histogram{"relay": parseStageHistograms(later, stageMetric)}
	b := stageBudget(before, after)
	q, ok := b["relay claimed_to_reported"]
	if !ok || q.count != 200 {
		t.Fatalf("budget %+v", b)
	}
	// All 200 new observations fell in (2 ms, 5 ms].
	if math.Abs(q.p50-3.5) > 1e-9 {
		t.Errorf("p50 %v ms, want 3.5", q.p50)
	}
	if _, ok := b["relay input_to_fetched"]; ok {
		t.Errorf("a stage with nothing new between the scrapes is listed")
	}
}

func TestStageOrderFollowsThePath(t *testing.T) {
	in := []string{
		"bench " + benchStage, "relay claimed_to_batch_reported", "relay zeta", "relay notify_to_claimed",
		"ingestor parsed_to_committed", "relay created_to_claimed", "ingestor input_to_fetched", "relay alpha",
		"ingestor fetched_to_parsed", "relay claimed_to_reported", "relay created_to_published", "ingestor input_to_committed",
	}
	want := []string{
		"ingestor input_to_fetched", "ingestor fetched_to_parsed", "ingestor parsed_to_committed", "ingestor input_to_committed",
		"relay notify_to_claimed", "relay created_to_claimed",
		"relay claimed_to_batch_reported", "relay claimed_to_reported", "relay created_to_published",
		"bench " + benchStage, "relay alpha", "relay zeta",
	}
	if got := stageOrder(in); !slices.Equal(got, want) {
		t.Errorf("order\n got %q\nwant %q", got, want)
	}
}

func TestBudgetTableWithoutServiceStages(t *testing.T) {
	s := &latencySeries{rate: 1000, stages: []map[string]stageQuantiles{{"bench " + benchStage: {binary: "bench", p50: 1, p99: 2, fromBench: true}}}}
	out := budgetTable([]*latencySeries{s})
	if !strings.Contains(out, "budget is unavailable") || !strings.Contains(out, benchStage) {
		t.Errorf("table:\n%s", out)
	}
	s.stages[0]["relay claimed_to_reported"] = stageQuantiles{binary: "relay", p50: 3, p99: 4}
	out = budgetTable([]*latencySeries{s})
	if strings.Contains(out, "unavailable") || !strings.Contains(out, "| claimed_to_reported | relay | 3.00 | 4.00 |") {
		t.Errorf("table:\n%s", out)
	}
}
