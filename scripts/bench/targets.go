package main

import (
	"fmt"
	"slices"
	"strings"
)

// The targets of issue 13, each service figure beside the ceiling or floor
// measured in the same bench run: PASS, FAIL, or n/a when a phase it needs
// did not run (BENCH_ONLY, BENCH_E2E_RATES, the time budget) or failed.

// spread is "min–max" of xs in format f.
func spread(xs []float64, f string) string {
	if len(xs) == 0 {
		return "—"
	}
	return fmt.Sprintf(f+"–"+f, slices.Min(xs), slices.Max(xs))
}

func passFail(ok, have bool) string {
	switch {
	case !have:
		return "n/a"
	case ok:
		return "PASS"
	}
	return "**FAIL**"
}

func targetsTable(r *results) string {
	var sb strings.Builder
	row := func(cells ...string) { sb.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	row("Figure (issue 13)", "Service, median", "Spread (runs)", "Ceiling / floor, median", "Spread (runs)", "Ratio", "Target", "Result")
	row("---", "---:", "---", "---:", "---", "---:", "---", "---")
	runs := func(xs []float64) string { return fmt.Sprintf("%s (%d)", spread(xs, "%.1f"), len(xs)) }
	rateRuns := func(xs []float64) string {
		if len(xs) == 0 {
			return "— (0)"
		}
		return fmt.Sprintf("%s–%s (%d)", fmtRate(slices.Min(xs)), fmtRate(slices.Max(xs)), len(xs))
	}

	lat := func(rate int) *latencySeries {
		if s := find(r.lat.series, rate); s != nil {
			return s
		}
		return &latencySeries{rate: rate}
	}
	fl := func(rate int) *latencySeries {
		if s := find(r.floor.series, rate); s != nil {
			return s
		}
		return &latencySeries{rate: rate}
	}
	l1, l4, f1 := lat(1000), lat(4000), fl(1000)
	floorCells := func(xs []float64) (string, string) {
		if len(xs) == 0 {
			return "n/a", "— (0)"
		}
		return fmt.Sprintf("%.1f ms (floor)", median(xs)), runs(xs)
	}
	fc, fs := floorCells(f1.p50)
	row("e2e p50 at 1,000 passports/s", ms(l1.p50), runs(l1.p50), fc, fs, ratio(l1.p50, f1.p50), "≤ 6 ms", passFail(median(l1.p50) <= 6, len(l1.p50) > 0))
	fc, fs = floorCells(f1.p99)
	row("e2e p99 at 1,000 passports/s", ms(l1.p99), runs(l1.p99), fc, fs, ratio(l1.p99, f1.p99), "≤ 15 ms", passFail(median(l1.p99) <= 15, len(l1.p99) > 0))
	f4 := fl(4000)
	fc, fs = floorCells(f4.p99)
	row("e2e p99 at 4,000 passports/s", ms(l4.p99), runs(l4.p99), fc, fs, ratio(l4.p99, f4.p99), "≤ 30 ms", passFail(median(l4.p99) <= 30, len(l4.p99) > 0))

	dI, cI := median(r.ing.def), median(r.ingCeil.rates)
	haveI := len(r.ing.def) > 0 && len(r.ingCeil.rates) > 0
	ofI, ofICell := dI/cI, pctRatio(dI, cI, haveI)
	if r.ing.paired() {
		ofI = median(r.ing.ofCeiling)
		ofICell = fmt.Sprintf("%.0f %% (paired runs: %s)", 100*ofI, spread(pcts(r.ing.ofCeiling), "%.0f"))
	}
	row("ingest, default, passports/s", fmtRate(dI), rateRuns(r.ing.def), fmtRate(cI)+" (DB-only writer)", rateRuns(r.ingCeil.rates),
		ofICell, "≥ 90 % of the DB-only ceiling", passFail(ofI >= 0.9, haveI))
	dR, cR := median(r.rel.def), median(r.relCeil.rates)
	haveR := len(r.rel.def) > 0 && len(r.relCeil.rates) > 0
	row("relay, default, events/s", fmtRate(dR), rateRuns(r.rel.def), fmtRate(cR)+" (raw producer)", rateRuns(r.relCeil.rates),
		pctRatio(dR, cR, haveR), "≥ 90 % of the raw-produce ceiling", passFail(dR >= 0.9*cR, haveR))
	cD := median(r.relDB.rates)
	haveD := len(r.rel.def) > 0 && len(r.relDB.rates) > 0
	row("relay, default, events/s, against its DB bound (not a target: where the gap is)", fmtRate(dR), rateRuns(r.rel.def), fmtRate(cD)+" (the relay without Kafka)", rateRuns(r.relDB.rates),
		pctRatio(dR, cD, haveD), "—", "—")
	haveF := len(l1.p99) > 0 && len(f1.p99) > 0
	q := 0.0
	if haveF {
		q = median(l1.p99) / median(f1.p99)
	}
	fc, fs = floorCells(f1.p99)
	row("e2e p99 ÷ two-hop Kafka floor p99, 1,000/s", ms(l1.p99), runs(l1.p99), fc, fs, ratio(l1.p99, f1.p99), "≤ 3×", passFail(q <= 3, haveF))
	if r.ing.paired() {
		sb.WriteString("\nThe ingest's ratio is the median of its runs' ratios, each default run to the ceiling run timed right after it; the other ratios are of the medians.")
	} else {
		sb.WriteString("\nRatios are of the medians.")
	}
	sb.WriteString(" Figures from a loaded machine are noise: compare only those of one run of `make bench` on an otherwise idle machine.")
	if w := capacityWarning(r.capacity); w != "" {
		sb.WriteString(" " + w)
	}
	sb.WriteString("\n")
	return sb.String()
}

func ms(xs []float64) string {
	if len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f ms", median(xs))
}

func ratio(num, den []float64) string {
	if len(num) == 0 || len(den) == 0 || median(den) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", median(num)/median(den))
}

// pcts is xs as percentages.
func pcts(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = 100 * x
	}
	return out
}

func pctRatio(x, ceiling float64, have bool) string {
	if !have || ceiling == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f %%", 100*x/ceiling)
}
