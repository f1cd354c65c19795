package main

import (
	"strings"
	"testing"
)

// ingestRow is the targets table's ingest line.
func ingestRow(t *testing.T, r *results) string {
	t.Helper()
	for _, l := range strings.Split(targetsTable(r), "\n") {
		if strings.HasPrefix(l, "| ingest, default") {
			return l
		}
	}
	t.Fatalf("no ingest row in:\n%s", targetsTable(r))
	return ""
}

// Paired runs are judged by the median of their own ratios, not by the
// ratio of the medians: here the two disagree (75, 97 and 95 % against
// 7,000 ÷ 8,000 = 88 %), as they do when the host's speed drifts between
// pairs.
func TestIngestTargetOfPairedRuns(t *testing.T) {
	def, ceil := []float64{6_000, 7_000, 8_000}, []float64{8_000, 7_200, 8_400}
	paired := &results{
		ing:     ingestResults{def: def, ofCeiling: []float64{6_000.0 / 8_000, 7_000.0 / 7_200, 8_000.0 / 8_400}},
		ingCeil: ingestCeilingResults{rates: ceil},
	}
	row := ingestRow(t, paired)
	for _, want := range []string{"95 % (paired runs: 75–97)", "PASS"} {
		if !strings.Contains(row, want) {
			t.Errorf("paired row %q lacks %q", row, want)
		}
	}
	if !strings.Contains(targetsTable(paired), "median of its runs' ratios") {
		t.Error("the note under the table does not say how the paired ratio is taken")
	}

	alone := &results{ing: ingestResults{def: def}, ingCeil: ingestCeilingResults{rates: ceil}}
	row = ingestRow(t, alone)
	for _, want := range []string{"| 88 % |", "**FAIL**"} {
		if !strings.Contains(row, want) {
			t.Errorf("unpaired row %q lacks %q", row, want)
		}
	}
}
