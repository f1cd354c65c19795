package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type machineInfo struct {
	cores              int
	cpu, goVer, pgVer  string
	kernel, date, load string
}

func (b *bench) machine() machineInfo {
	m := machineInfo{cores: runtime.NumCPU(), goVer: runtime.Version(), date: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	_ = b.scalar(b.pg.URL("postgres"), `select current_setting('server_version')`, &m.pgVer)
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	if out, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.load = strings.Join(strings.Fields(string(out))[:3], " ")
	}
	return m
}

// ---------------------------------------------------------------- report

func fmtRate(x float64) string {
	if x == 0 {
		return "n/a"
	}
	return groupDigits(int64(x + 0.5))
}

func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func verdict(ok bool, have bool) string {
	switch {
	case !have:
		return "n/a"
	case ok:
		return "yes"
	}
	return "**no**"
}

func (b *bench) table(ing ingestResults, rel relayResults, lat latencyResults, blg backlogResults, m machineInfo) string {
	var sb strings.Builder
	row := func(cells ...string) { sb.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	row("Measure", "Setting", "Median", "Runs", "Target", "Met")
	row("---", "---", "---:", "---:", "---", "---")
	n := func(xs []float64) string { return strconv.Itoa(len(xs)) }

	dI, oI, rI := median(ing.def), median(ing.one), median(ing.ratios)
	row("Ingest, passports/s", "`INGEST_BATCH_SIZE=1`", fmtRate(oI), n(ing.one), "—", "")
	row("Ingest, passports/s", "default (`INGEST_BATCH_SIZE=500`)", fmtRate(dI), n(ing.def), "≥ 5,000/s", verdict(dI >= 5000, len(ing.def) > 0))
	row("Ingest speed-up", "default ÷ per-message, same run", fmt.Sprintf("%.1f×", rI), n(ing.ratios), "≥ 5×", verdict(rI >= 5, len(ing.ratios) > 0))

	sR, dR, rR := median(rel.seed), median(rel.def), median(rel.ratios)
	row("Relay, events/s", "seed (`OUTBOX_BATCH_SIZE=50`, `OUTBOX_POLL_INTERVAL=1s`)", fmtRate(sR), n(rel.seed), "—", "")
	row("Relay, events/s", "default (`OUTBOX_BATCH_SIZE=500`)", fmtRate(dR), n(rel.def), "≥ 8,000/s", verdict(dR >= 8000, len(rel.def) > 0))
	row("Relay speed-up", "default ÷ seed, same run", fmt.Sprintf("%.1f×", rR), n(rel.ratios), "—", "")

	setting := fmt.Sprintf("%s passports/s for %s, both binaries", groupDigits(int64(b.cfg.e2eRate)), b.cfg.e2eFor)
	p99 := median(lat.p99)
	row("End-to-end latency p50, ms", setting, fmt.Sprintf("%.1f", median(lat.p50)), n(lat.p50), "—", "")
	row("End-to-end latency p95, ms", setting, fmt.Sprintf("%.1f", median(lat.p95)), n(lat.p95), "—", "")
	row("End-to-end latency p99, ms", setting, fmt.Sprintf("%.1f", p99), n(lat.p99), "≤ 100 ms", verdict(p99 <= 100, len(lat.p99) > 0))

	bs := median(blg.secs)
	row(fmt.Sprintf("Backlog drain, s (%s rows)", groupDigits(int64(b.cfg.backlogRows))), fmt.Sprintf("relay defaults; %s events/s", fmtRate(median(blg.rates))),
		fmt.Sprintf("%.1f", bs), n(blg.secs), "≤ 30 s", verdict(bs <= 30, len(blg.secs) > 0))
	row("Machine", fmt.Sprintf("%d cores (%s), %s, PostgreSQL %s (fsync on), kfake devbroker", m.cores, m.cpu, m.goVer, m.pgVer), m.date, "", "", "")
	return sb.String()
}

func (b *bench) writeReport(table string, ing ingestResults, rel relayResults, lat latencyResults, blg backlogResults) {
	path := os.Getenv("BENCH_REPORT")
	if path == "" {
		path = filepath.Join(moduleRoot(), "bench-report.md")
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Benchmark report\n\nWritten by `make bench` (scripts/bench.sh → scripts/bench) on %s; overwritten by each run. Total time %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), time.Since(b.start).Round(time.Second))
	sb.WriteString(table)
	sb.WriteString("\n## How each figure is taken\n\n")
	fmt.Fprintf(&sb, "- **Ingest**: %s passports pre-filled on a 3-partition input topic; each run starts bin/ingestor with a new consumer group on a fresh, migrated database. "+
		"Rate = passports committed from the first offset commit to the end of every partition ÷ that time (process start and group join excluded; the default runs took %s from process start to the end). "+
		"INGEST_BATCH_SIZE=1 runs stop after %s past the first commit and take the rate over what was committed by then%s. The ratio is taken per run (default and per-message back to back), then the median of the ratios.\n",
		groupDigits(int64(b.cfg.ingestN)), durList(ing.toEnd), b.cfg.perMessageCap, strings.Join(uniq(ing.partial), ";"))
	fmt.Fprintf(&sb, "- **Relay**: a file-level copy of a database the ingestor filled in the ingest phase (%s PENDING rows, real payloads); bin/outbox-relay publishes to the dev broker; rate = published rows (the relay's route_passport_outbox_published_total) from the first to the last ÷ that time; PUBLISHED is then checked in SQL.\n",
		groupDigits(int64(rel.rows)))
	fmt.Fprintf(&sb, "- **Latency**: both binaries running on a fresh database; a producer sends valid passports at a steady rate, noting each send time by routeId; a consumer on both output topics takes receive time − send time for each output record (two per passport). Percentiles over every output record of the run (samples per run: %v; missing outputs per run: %v; max ms per run: %v).\n",
		lat.samples, lat.missing, roundAll(lat.max))
	fmt.Fprintf(&sb, "- **Backlog**: the ingest database grown by SQL to %s outbox rows (copies of the real passports and payloads with new ids; built in %s), copied per run; time from relay process start until every row is published.\n",
		groupDigits(int64(blg.rows)), blg.build.Round(time.Second))
	for _, l := range lat.slow {
		fmt.Fprintf(&sb, "  - latency %s\n", l)
	}
	sb.WriteString("- Each figure is the median of the runs counted in the table (≥ 3 when the time budget allows). Targets are reported, never enforced.\n")

	sb.WriteString("\n## Per run\n\n")
	fmt.Fprintf(&sb, "- ingest default: %s passports/s\n- ingest INGEST_BATCH_SIZE=1: %s passports/s\n- ingest ratio: %s\n", rates(ing.def), rates(ing.one), ratiosStr(ing.ratios))
	fmt.Fprintf(&sb, "- relay seed: %s events/s\n- relay default: %s events/s\n- relay ratio: %s\n", rates(rel.seed), rates(rel.def), ratiosStr(rel.ratios))
	fmt.Fprintf(&sb, "- latency p50/p95/p99 ms: %v / %v / %v\n", roundAll(lat.p50), roundAll(lat.p95), roundAll(lat.p99))
	fmt.Fprintf(&sb, "- backlog drain s: %v (events/s %s)\n", roundAll(blg.secs), rates(blg.rates))

	sb.WriteString("\n## What the machine was doing\n\nCPU in cores (CPU seconds ÷ wall seconds) of the service process, of the PostgreSQL processes serving the cluster, and of the whole machine (busy share of all cores; “rest” = busy cores not used by the service or PostgreSQL: the dev broker, the benchmark's own producer/consumer, and any other load on the machine, which skews the figures); PostgreSQL wait events sampled every 100 ms from pg_stat_activity (active backends only; `CPU` = no wait event).\n\n")
	sb.WriteString("| Phase | Service CPU | PostgreSQL CPU | Machine busy | Rest of the machine | Top wait events |\n|---|---:|---:|---:|---:|---|\n")
	for _, ph := range []struct {
		name string
		obs  []observation
	}{
		{"ingest default", ing.obsDef}, {"ingest INGEST_BATCH_SIZE=1", ing.obsOne},
		{"relay seed", rel.obsSeed}, {"relay default", rel.obsDef},
		{"latency (ingestor + relay)", lat.obs}, {"backlog drain", blg.obs},
	} {
		if len(ph.obs) == 0 {
			continue
		}
		o := ph.obs[len(ph.obs)/2]
		fmt.Fprintf(&sb, "| %s | %s | %.2f | %.0f %% | %.2f | %s |\n", ph.name, o.procCPU(), o.pgCores, 100*o.machineBusy, o.rest(), o.topWaits(5))
	}
	var errs []string
	for _, e := range [][]string{ing.errs, rel.errs, lat.errs, blg.errs} {
		errs = append(errs, e...)
	}
	if len(errs)+len(b.notes) > 0 {
		sb.WriteString("\n## Problems\n\n")
		for _, e := range append(errs, b.notes...) {
			sb.WriteString("- " + strings.ReplaceAll(e, "\n", "\n  ") + "\n")
		}
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.t.Errorf("bench: write %s: %v", path, err)
		return
	}
	for _, e := range errs {
		fmt.Println("bench: problem:", e)
	}
	fmt.Printf("bench: report written to %s\n", path)
}

func rates(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmtRate(x))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func ratiosStr(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.1f×", x))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func roundAll(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(int(x*10+0.5)) / 10
	}
	return out
}

func durList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(100*time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}

func uniq(xs []string) []string {
	slices.Sort(xs)
	return slices.Compact(xs)
}

func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
