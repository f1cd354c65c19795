package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pcp/route-processing/scripts/internal/machine"
)

type machineInfo struct {
	cores              int
	cpu, goVer, pgVer  string
	kernel, date, load string
	writeback          string
}

func (b *bench) machine() machineInfo {
	m := machineInfo{cores: runtime.NumCPU(), goVer: runtime.Version(), date: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	m.cpu = machine.CPUModel()
	_ = b.scalar(b.pg.URL("postgres"), `select current_setting('server_version')`, &m.pgVer)
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	m.writeback = machine.Writeback()
	if f := strings.Fields(machine.LoadAvg()); len(f) >= 3 {
		m.load = strings.Join(f[:3], " ")
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

func (b *bench) table(r *results, m machineInfo) string {
	ing, rel, blg := r.ing, r.rel, r.blg
	var sb strings.Builder
	row := func(cells ...string) { sb.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	row("Measure", "Setting", "Median", "Runs", "Target", "Met")
	row("---", "---", "---:", "---:", "---", "---")
	n := func(xs []float64) string { return strconv.Itoa(len(xs)) }

	dI, oI, rI := median(ing.def), median(ing.one), median(ing.ratios)
	row("Ingest, passports/s", "`INGEST_BATCH_SIZE=1`", fmtRate(oI), n(ing.one), "—", "")
	row("Ingest, passports/s", "default", fmtRate(dI), n(ing.def), "≥ 5,000/s", verdict(dI >= 5000, len(ing.def) > 0))
	row("Ingest speed-up", "default ÷ per-message, same run", fmt.Sprintf("%.1f×", rI), n(ing.ratios), "≥ 5×", verdict(rI >= 5, len(ing.ratios) > 0))
	row("Ingest ceiling, passports/s", fmt.Sprintf("DB-only writer: parse + COPY + `INSERT … SELECT … ON CONFLICT`, %s per transaction, %d connections", groupDigits(ceilingIngestTxRows), ceilingIngestConns),
		fmtRate(median(r.ingCeil.rates)), n(r.ingCeil.rates), "—", "")

	sR, dR, rR := median(rel.seed), median(rel.def), median(rel.ratios)
	row("Relay, events/s", "seed (`OUTBOX_BATCH_SIZE=50`, `OUTBOX_POLL_INTERVAL=1s`)", fmtRate(sR), n(rel.seed), "—", "")
	row("Relay, events/s", "default", fmtRate(dR), n(rel.def), "≥ 8,000/s", verdict(dR >= 8000, len(rel.def) > 0))
	row("Relay speed-up", "default ÷ seed, same run", fmt.Sprintf("%.1f×", rR), n(rel.ratios), "—", "")
	row("Relay ceiling, events/s", fmt.Sprintf("raw producer, the relay's settings, the same records, %s per ProduceBatch, %d in flight", groupDigits(ceilingRelayChunk), ceilingRelayInFlight),
		fmtRate(median(r.relCeil.rates)), n(r.relCeil.rates), "—", "")
	shape := b.relayConfig().Config.WithDefaults()
	row("Raw producer in the relay's shape, events/s", fmt.Sprintf("the same, %d per ProduceBatch, %d in flight (OUTBOX_BATCH_SIZE, OUTBOX_WORKERS)", shape.BatchSize, shape.Workers),
		fmtRate(median(r.relCeil.shaped)), n(r.relCeil.shaped), "—", "")
	row("Relay DB bound, events/s", "the relay's code and settings on a copy of the same database, a publisher that acknowledges at once (no Kafka)",
		fmtRate(median(r.relDB.rates)), n(r.relDB.rates), "—", "")

	for _, s := range r.lat.series {
		setting := fmt.Sprintf("%s passports/s for %s, both binaries", groupDigits(int64(s.rate)), b.cfg.e2eFor)
		p99 := median(s.p99)
		row("End-to-end latency p50, ms", setting, fmt.Sprintf("%.1f", median(s.p50)), n(s.p50), "—", "")
		row("End-to-end latency p95, ms", setting, fmt.Sprintf("%.1f", median(s.p95)), n(s.p95), "—", "")
		row("End-to-end latency p99, ms", setting, fmt.Sprintf("%.1f", p99), n(s.p99), "≤ 100 ms", verdict(p99 <= 100, len(s.p99) > 0))
	}
	for _, s := range r.floor.series {
		setting := fmt.Sprintf("%s records/s for %s, two Kafka hops alone", groupDigits(int64(s.rate)), b.cfg.floorFor)
		row("Latency floor p50 / p95 / p99, ms", setting, fmt.Sprintf("%.1f / %.1f / %.1f", median(s.p50), median(s.p95), median(s.p99)), n(s.p99), "—", "")
	}

	bs := median(blg.secs)
	row(fmt.Sprintf("Backlog drain, s (%s rows)", groupDigits(int64(b.cfg.backlogRows))), fmt.Sprintf("relay defaults; %s events/s", fmtRate(median(blg.rates))),
		fmt.Sprintf("%.1f", bs), n(blg.secs), "≤ 30 s", verdict(bs <= 30, len(blg.secs) > 0))
	row("Machine", fmt.Sprintf("%d cores (%s), %s, PostgreSQL %s (fsync on), kfake devbroker; load average %s at the start; page-cache writeback %s; the host gave %s (between phases; see What the machine was doing)", m.cores, m.cpu, m.goVer, m.pgVer, m.load, m.writeback, capacitySummary(r.capacity)), m.date, "", "", "")
	return sb.String()
}

func (b *bench) writeReport(table, targets string, r *results) {
	ing, rel, blg := r.ing, r.rel, r.blg
	path := os.Getenv("BENCH_REPORT")
	if path == "" {
		path = filepath.Join(moduleRoot(), "bench-report.md")
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Benchmark report\n\nWritten by `make bench` (scripts/bench.sh → scripts/bench) on %s; overwritten by each run. Total time %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), time.Since(b.start).Round(time.Second))
	sb.WriteString(table)
	sb.WriteString("\n## Targets against the ceilings of this run\n\n")
	sb.WriteString(targets)
	sb.WriteString("\n## Latency budget\n\n")
	sb.WriteString(budgetTable(r.lat.series))
	sb.WriteString("\n## How each figure is taken\n\n")
	fmt.Fprintf(&sb, "- **Ingest**: %s passports pre-filled on a 3-partition input topic; each run starts bin/ingestor with a new consumer group on a fresh, migrated database. "+
		"Rate = passports committed from the first offset commit to the end of every partition ÷ that time (process start and group join excluded; the default runs took %s from process start to the end). "+
		"INGEST_BATCH_SIZE=1 runs stop after %s past the first commit and take the rate over what was committed by then%s. The ratio is taken per run (default and per-message back to back), then the median of the ratios.\n",
		groupDigits(int64(b.cfg.ingestN)), durList(ing.toEnd), b.cfg.perMessageCap, strings.Join(uniq(ing.partial), ";"))
	fmt.Fprintf(&sb, "- **Ingest ceiling**: the same %s passports written by the bench itself into a fresh database of the same cluster with the same migrations: per 1,000 passports, parse and render the payloads (pkg/passport), COPY the passports and their 2 outbox rows each into temporary tables, `INSERT … SELECT … ON CONFLICT` into route_passports and route_passport_outbox (the service's upsert and insert-if-absent), NOTIFY, commit; two connections. Rate = passports ÷ time from the first transaction to the last commit.%s\n",
		groupDigits(int64(r.ingCeil.n)), pairedNote(ing.paired()))
	fmt.Fprintf(&sb, "- **Relay**: a file-level copy of a database the ingestor filled in the ingest phase (%s PENDING rows, real payloads; the bench vacuums and analyzes it right after its ingest run, so that autovacuum does not do so inside a later phase's timing); bin/outbox-relay publishes to the dev broker; rate = published rows (the relay's route_passport_outbox_published_total) from the first to the last ÷ that time; PUBLISHED is then checked in SQL.\n",
		groupDigits(int64(rel.rows)))
	fmt.Fprintf(&sb, "- **Relay ceiling**: the %s records the relay would publish for the ingest phase's passports (keys, headers and topics built as the ingestor builds the outbox rows, payloads passed through jsonb as the relay reads them back), produced by a producer with the relay's settings to the same broker in chunks of %s, %d chunks in flight; rate = records ÷ time from the first produce to the last delivery report. The same records are then produced in the relay's shape (its batch size per ProduceBatch, its worker count in flight), for comparison only.\n",
		groupDigits(int64(r.relCeil.n)), groupDigits(ceilingRelayChunk), ceilingRelayInFlight)
	sb.WriteString("- **Relay DB bound**: the relay's own code (pkg/relay with the service's settings: its claims, marks, LISTEN and housekeeping) inside the bench process, on a file-level copy of the same database as the relay runs, with a publisher that acknowledges every record at once; rate as for the relay. What the relay could publish if Kafka cost nothing: with the raw-producer ceiling (Kafka alone, no database) it brackets the relay, and the lower of the two says where the gap is. Its CPU shows under “rest” (the bench process).\n")
	var samples, missing []int
	var maxes []float64
	for _, s := range r.lat.series {
		samples, missing, maxes = append(samples, s.samples...), append(missing, s.missing...), append(maxes, s.max...)
	}
	fmt.Fprintf(&sb, "- **Latency**: at each rate of %v, both binaries running on a fresh database and topics (once, before the first run, PostgreSQL fills %d WAL segments and checkpoints, so that the runs write into recycled segments as a server in its steady state does: scripts/bench/wal.go); after one warm-up passport through the whole path (its outputs awaited) and %s more at the same rate (not counted: the clock starts on a system in its steady state at that rate, not on a fresh database and process), a producer sends valid passports at a steady rate, noting each send time by routeId; a consumer on both output topics takes receive time − send time for each output record (two per passport). Percentiles over every output record of the run (samples per run: %v; missing outputs per run: %v; max ms per run: %v). Meanwhile the bench times the disk under the commits: every %s an 8-kB write and fdatasync of a file allocated beforehand beside the cluster's data directory (the commit_fsync row of the latency budget; the seconds with a sync over 20 ms in each run's line below, to set against the seconds with a latency over 100 ms).\n",
		b.cfg.e2eRates, walSegments, b.cfg.warmFor, samples, missing, roundAll(maxes), diskProbeEvery)
	fmt.Fprintf(&sb, "- **Floor**: the same producer and output consumer, with the service replaced by a consumer with the ingestor's settings that hands what it polled at once to a producer with the relay's settings (two records per input); the same warm-up, then %s per rate.\n", b.cfg.floorFor)
	fmt.Fprintf(&sb, "- **Backlog**: the ingest database grown by SQL to %s outbox rows (copies of the real passports and payloads with new ids; built in %s), copied per run; time from relay process start until every row is published.\n",
		groupDigits(int64(blg.rows)), blg.build.Round(time.Second))
	for _, s := range r.lat.series {
		for _, l := range s.slow {
			fmt.Fprintf(&sb, "  - latency %s\n", l)
		}
	}
	if len(b.cfg.serviceEnv) > 0 {
		fmt.Fprintf(&sb, "- **Both binaries ran with `%s`** (BENCH_SERVICE_ENV) in every phase; otherwise with their defaults.\n", strings.Join(b.cfg.serviceEnv, " "))
	}
	if b.cfg.dbSQL != "" {
		fmt.Fprintf(&sb, "- **Every database of the phases ran `%s`** (BENCH_DB_SQL) after its migration.\n", b.cfg.dbSQL)
	}
	sb.WriteString("- Each figure is the median of the runs counted in the table (≥ 3 when the time budget allows). Targets are reported, never enforced.\n")
	sb.WriteString("\n### The bench's own Kafka clients\n\n")
	for _, c := range clientSettings() {
		sb.WriteString("- " + c + "\n")
	}

	sb.WriteString("\n## Per run\n\n")
	fmt.Fprintf(&sb, "- ingest default: %s passports/s\n- ingest INGEST_BATCH_SIZE=1: %s passports/s\n- ingest ratio: %s\n- ingest ceiling: %s passports/s\n",
		rates(ing.def), rates(ing.one), ratiosStr(ing.ratios), rates(r.ingCeil.rates))
	if ing.paired() {
		fmt.Fprintf(&sb, "- ingest default ÷ the ceiling run right after it: %v %%\n", roundAll(pcts(ing.ofCeiling)))
	}
	fmt.Fprintf(&sb, "- relay seed: %s events/s\n- relay default: %s events/s\n- relay ratio: %s\n- relay ceiling: %s records/s (in the relay's shape: %s)\n- relay DB bound: %s events/s\n",
		rates(rel.seed), rates(rel.def), ratiosStr(rel.ratios), rates(r.relCeil.rates), rates(r.relCeil.shaped), rates(r.relDB.rates))
	for _, s := range r.lat.series {
		fmt.Fprintf(&sb, "- latency at %s/s p50/p95/p99 ms: %v / %v / %v\n", groupDigits(int64(s.rate)), roundAll(s.p50), roundAll(s.p95), roundAll(s.p99))
	}
	for _, s := range r.floor.series {
		fmt.Fprintf(&sb, "- floor at %s/s p50/p95/p99 ms: %v / %v / %v\n", groupDigits(int64(s.rate)), roundAll(s.p50), roundAll(s.p95), roundAll(s.p99))
	}
	fmt.Fprintf(&sb, "- backlog drain s: %v (events/s %s)\n", roundAll(blg.secs), rates(blg.rates))

	sb.WriteString("\n## What the machine was doing\n\nCPU in cores (CPU seconds ÷ wall seconds) of the service process, of the PostgreSQL processes serving the cluster, and of the whole machine (busy share of all cores; “stolen” = the share the host gave to other tenants while this machine wanted to run, which slows every process alike and shows in no process's CPU; the dev broker's process; the bench process: its own producer and consumer and, in the floor and the ceilings, the stand-ins, writer or producer it runs; “rest” = busy cores used by none of these: the kernel's own threads and any other load on the machine, which skews the figures); context switches per second of the whole machine (/proc/stat: on this virtual machine a switch costs the host a trap, so their rate shows CPU that no process's own work accounts for); PostgreSQL wait events sampled every 100 ms from pg_stat_activity (active backends only; `CPU` = no wait event). The floor rows are the harness alone at the latency phase's rates: what the latency runs' service and PostgreSQL share the machine with.\n\n")
	sb.WriteString("| Phase | Service CPU | PostgreSQL CPU | Dev broker CPU | Bench process CPU | Machine busy | Stolen | Rest of the machine | Context switches/s | Top wait events |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	type phaseObs struct {
		name string
		obs  []observation
	}
	all := []phaseObs{
		{"ingest default", ing.obsDef}, {"ingest INGEST_BATCH_SIZE=1", ing.obsOne}, {"ingest ceiling (DB-only writer)", r.ingCeil.obs},
		{"relay seed", rel.obsSeed}, {"relay default", rel.obsDef}, {"relay ceiling (raw producer)", r.relCeil.obs},
		{"relay DB bound (no Kafka; the relay in the bench process)", r.relDB.obs},
	}
	for _, s := range r.lat.series {
		all = append(all, phaseObs{fmt.Sprintf("latency at %s/s (ingestor + relay)", groupDigits(int64(s.rate))), s.obs})
	}
	for _, s := range r.floor.series {
		all = append(all, phaseObs{fmt.Sprintf("floor at %s/s (two Kafka hops, no service)", groupDigits(int64(s.rate))), s.obs})
	}
	all = append(all, phaseObs{"backlog drain", blg.obs})
	for _, ph := range all {
		if len(ph.obs) == 0 {
			continue
		}
		o := ph.obs[len(ph.obs)/2]
		fmt.Fprintf(&sb, "| %s | %s | %.2f | %.2f | %.2f | %.0f %% | %.0f %% | %.2f | %s | %s |\n", ph.name, o.procCPU(), o.pgCores, o.brokerCores, o.benchCores,
			100*o.machineBusy, 100*o.steal, o.rest(), groupDigits(int64(o.switches)), o.topWaits(5))
	}
	if len(r.capacity) > 0 {
		fmt.Fprintf(&sb, "\nWhat the host gave this machine, read before each phase (scripts/internal/machine: SHA-256 of a 1-MB buffer on one core, then on every core at once; a getppid system call; the first touch of an anonymous page; half a round trip of one byte between two threads over pipes; medians of %d). On a shared, paravirtualised host these move by themselves and show in no other column (the kernel's entries are traps to the host, and a core shared with another tenant's thread is not “stolen”): runs are comparable only when these are.\n\n", capacityRounds)
		for _, c := range r.capacity {
			fmt.Fprintf(&sb, "- %s: %s\n", c.when, c.c)
		}
	}
	var errs []string
	for _, e := range [][]string{ing.errs, r.ingCeil.errs, rel.errs, r.relCeil.errs, r.relDB.errs, r.lat.errs, r.floor.errs, blg.errs} {
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

func pairedNote(paired bool) string {
	if !paired {
		return ""
	}
	return " Each run follows a default ingest run at once (before the per-message run), and the ingest's ratio to the ceiling is taken per pair, then the median of the pairs: this host's speed drifts from one minute to the next, and a pair shares its minute."
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
