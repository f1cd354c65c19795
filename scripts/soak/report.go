package main

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// writeOutputs writes the report, the CSV and the chart next to each other.
func writeOutputs(r *run, v []target) error {
	dir := filepath.Dir(r.cfg.report)
	base := strings.TrimSuffix(filepath.Base(r.cfg.report), filepath.Ext(r.cfg.report))
	csvPath := filepath.Join(dir, strings.Replace(base, "report", "samples", 1)+".csv")
	pngPath := filepath.Join(dir, strings.Replace(base, "report", "chart", 1)+".png")
	if err := writeCSV(csvPath, r.samples); err != nil {
		return err
	}
	if err := writeChart(pngPath, r); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return os.WriteFile(r.cfg.report, []byte(reportText(r, v, filepath.Base(csvPath), filepath.Base(pngPath))), 0o644)
}

var csvHeader = []string{"t_s", "hold", "outputs", "p50_ms", "p99_ms", "in_per_s", "out_per_s", "input_lag",
	"pending", "oldest_pending_s", "heap_bytes", "index_bytes", "toast_bytes", "total_bytes", "live_tuples",
	"dead_tuples", "toast_dead_tuples", "autovacuum_runs", "autovacuum_workers", "deleted_rows", "wal_bytes",
	"claims", "claim_ms", "oldest_snapshot_s", "cpu_ingestor", "cpu_relay", "cpu_postgres", "machine_busy", "machine_steal", "db_read",
	"pending_read", "pending_from", "checkpoints_begun", "checkpoint_write_ms", "checkpoint_sync_ms", "commits", "slow_commits", "broker_ack_max_ms"}

func writeCSV(path string, ss []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	ff := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	i := func(x int64) string { return strconv.FormatInt(x, 10) }
	for _, s := range ss {
		_ = w.Write([]string{i(int64(s.T.Seconds())), strconv.FormatBool(s.Hold), i(s.Outputs), ff(s.P50), ff(s.P99),
			ff(s.InRate), ff(s.OutRate), i(s.InputLag), i(s.Pending), ff(s.OldestPending), i(s.Heap), i(s.Index),
			i(s.Toast), i(s.Total()), i(s.Live), i(s.Dead), i(s.ToastDead), i(s.Autovacuums), i(s.AutovacuumActive),
			i(s.Deleted), i(s.WAL), i(s.Claims), ff(s.ClaimMs), ff(s.SnapshotAge), ff(s.CPUIngestor), ff(s.CPURelay),
			ff(s.CPUPostgres), ff(s.MachineBusy), ff(s.MachineSteal), strconv.FormatBool(s.DBRead),
			strconv.FormatBool(s.PendingRead()), s.PendingFrom, i(s.CheckpointsBegun), ff(s.CheckpointWriteMs), ff(s.CheckpointSyncMs),
			i(s.Commits), i(s.SlowCommits), ff(s.BrokerAckMs)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// minute aggregates the samples of one minute of the run.
type minute struct {
	n                               int
	hold                            bool
	p50, p99                        float64
	in, out                         float64
	lag, pending                    int64
	oldest                          float64
	last                            sample
	wal                             int64
	claimMs                         float64
	claims                          int64
	cpuIng, cpuRel, cpuPG, bsy, stl float64
	checkpointsEnded, slowCommits   int64
	syncMs, brokerAckMs             float64
}

func minutes(r *run) []minute {
	var out []minute
	for i, s := range r.samples {
		m := int((s.T - time.Second) / time.Minute)
		for len(out) <= m {
			out = append(out, minute{})
		}
		x := &out[m]
		x.n++
		x.hold = x.hold || s.Hold
		x.in += s.InRate
		x.out += s.OutRate
		x.lag, x.pending, x.oldest = max(x.lag, s.InputLag), max(x.pending, s.Pending), max(x.oldest, s.OldestPending)
		if s.DBRead || x.n == 1 {
			x.last = s
		}
		x.wal += s.WAL
		x.claimMs += s.ClaimMs * float64(s.Claims)
		x.claims += s.Claims
		if s.checkpointEnded() {
			x.checkpointsEnded++
		}
		x.syncMs, x.slowCommits = x.syncMs+s.CheckpointSyncMs, x.slowCommits+s.SlowCommits
		x.brokerAckMs = max(x.brokerAckMs, s.BrokerAckMs)
		x.cpuIng, x.cpuRel, x.cpuPG, x.bsy, x.stl = x.cpuIng+s.CPUIngestor, x.cpuRel+s.CPURelay, x.cpuPG+s.CPUPostgres, x.bsy+s.MachineBusy, x.stl+s.MachineSteal
		_ = i
	}
	for m := range out {
		x := &out[m]
		h := merged(r, time.Duration(m)*time.Minute, time.Duration(m+1)*time.Minute)
		x.p50, x.p99 = h.quantile(0.5), h.quantile(0.99)
		if x.n > 0 {
			k := float64(x.n)
			x.in, x.out, x.cpuIng, x.cpuRel, x.cpuPG, x.bsy, x.stl = x.in/k, x.out/k, x.cpuIng/k, x.cpuRel/k, x.cpuPG/k, x.bsy/k, x.stl/k
		}
		if x.claims > 0 {
			x.claimMs /= float64(x.claims)
		}
	}
	return out
}

func reportText(r *run, v []target, csvName, pngName string) string {
	var b strings.Builder
	c := r.cfg
	p := phasesOf(r)
	fmt.Fprintf(&b, "# Soak report\n\nWritten by `make soak` (scripts/soak.sh → scripts/soak) on %s; overwritten by each run. Total time %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), r.total.Round(time.Second))
	fmt.Fprintf(&b, "**Run:** %d passports/s (%s; %d events/s) for %s, `OUTBOX_RETENTION=%s`", c.rate, c.rateFrom, 2*c.rate, c.duration, c.retention)
	if c.hold > 0 {
		fmt.Fprintf(&b, ", one REPEATABLE READ snapshot held %s–%s", mmss(p.holdFrom), mmss(p.holdTo))
	}
	if len(c.relayEnv) > 0 {
		fmt.Fprintf(&b, ", relay settings `%s`", strings.Join(c.relayEnv, " "))
	}
	fmt.Fprintf(&b, ".\n\n**Machine:** %s.\n\n", r.machine)
	b.WriteString("## Targets (issue 12, item 4)\n\n| Target | Verdict | Figures |\n|---|---|---|\n")
	for _, x := range v {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", x.name, x.verdict(), x.detail)
	}
	if c.hold > 0 {
		b.WriteString("\n## The held snapshot\n\n")
		b.WriteString(holdText(r, p))
	}
	fmt.Fprintf(&b, "\n## Storage per passport\n\n%s.\n", r.passports)
	if s, ok := lastRead(r); ok {
		rows := max(s.Live, 1)
		fmt.Fprintf(&b, "\nOutbox at the end: %s for %d live rows (statistics) = %.0f bytes per live row (heap %.0f, indexes %.0f, TOAST %.0f), %d dead.\n",
			mb(s.Total()), s.Live, float64(s.Total())/float64(rows), float64(s.Heap)/float64(rows), float64(s.Index)/float64(rows), float64(s.Toast)/float64(rows), s.Dead)
	}
	fmt.Fprintf(&b, "\n## Chart\n\n![p99, pending and outbox size over time](%s)\n\nEvery %s sample is in [`%s`](%s).\n", pngName, c.sampleStep, csvName, csvName)
	fmt.Fprintf(&b, "\n## Per minute\n\nLatency over every output record that arrived in the minute; rates and CPU (cores) are means of the minute's samples; lag, pending and oldest are the worst sample; sizes, tuples and autovacuum runs (cumulative, heap + TOAST) are the minute's last sample; checkpoints are the windows in which one ended, with the time of their sync phases; slow commits are the ingestor's commits over 100 ms (its `committed` stage); broker ack ms is the slowest acknowledgement of the broker probe (a record produced every %s beside the load).\n\n", probeEvery)
	b.WriteString("| min | hold | p50 ms | p99 ms | in/s | out/s | input lag | pending | oldest s | outbox MB (heap/idx/toast) | live | dead | autovac | WAL MB | claim ms | checkpoints (sync s) | slow commits | broker ack ms | CPU ing/relay/pg | busy | stolen |\n")
	b.WriteString("|---:|:-:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for m, x := range minutes(r) {
		if x.n == 0 {
			continue
		}
		s := x.last
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %.0f | %.0f | %d | %d | %.1f | %.0f (%.0f/%.0f/%.0f) | %d | %d | %d | %.0f | %.2f | %d (%.1f) | %d | %.0f | %.2f/%.2f/%.2f | %.0f %% | %.0f %% |\n",
			m+1, map[bool]string{true: "●"}[x.hold], num(x.p50), num(x.p99), x.in, x.out, x.lag, x.pending, x.oldest,
			float64(s.Total())/1e6, float64(s.Heap)/1e6, float64(s.Index)/1e6, float64(s.Toast)/1e6, s.Live, s.Dead,
			s.Autovacuums, float64(x.wal)/1e6, x.claimMs, x.checkpointsEnded, x.syncMs/1000, x.slowCommits, x.brokerAckMs, x.cpuIng, x.cpuRel, x.cpuPG, 100*x.bsy, 100*x.stl)
	}
	b.WriteString("\n" + slowWindowsText(r) + "\n")
	b.WriteString("\nThe large retained outbox (20 M PUBLISHED rows: relay throughput, claim time, the retention sweep's delete rate and WAL) is measured by `make soak-large`: [soak-large-report.md](soak-large-report.md). Sizing: [docs/capacity.md](docs/capacity.md).\n")
	b.WriteString("\n## How the figures are taken\n\n")
	b.WriteString("- Both binaries run as processes (bin/ingestor, bin/outbox-relay, default settings unless stated) against a throwaway PostgreSQL cluster (fsync, synchronous_commit and full_page_writes on, default autovacuum, `pg_stat_statements` loaded) and the dev broker (kfake in a child process; records older than DEVBROKER_RETENTION=" + cmp.Or(os.Getenv("DEVBROKER_RETENTION"), "0 (kept)") + " dropped). The soak's own producer (passportgen, a realistic mix), consumer and sampler run in the soak program on the same machine.\n")
	b.WriteString("- Latency: receive time of each output record − send time of its passport; percentiles from 2 %-wide histogram buckets (so a figure is the bucket's upper bound, within 2 %).\n")
	b.WriteString("- Sizes: `pg_relation_size` (heap), `pg_indexes_size`, `pg_total_relation_size` of the TOAST table; tuples and autovacuum runs from `pg_stat_all_tables`; WAL from `pg_current_wal_lsn()`; pending and oldest from the PENDING rows (SQL), or from the relay's gauges of the same figures when that count timed out (the CSV's `pending_from`); claim time = mean execution time of the claim statement in `pg_stat_statements` over the window; CPU from /proc (PostgreSQL = postmaster, its live children and its reaped children).\n")
	sent, fails := r.probe.counts()
	fmt.Fprintf(&b, "- Broker ack ms: beside the load, a client of its own (no linger, acks=all) produces a 5-byte record every %s to a topic of its own; each window keeps the slowest acknowledgement that arrived in it (%d sent, %d failed). The dev broker serves every request on one goroutine, so a pause there (its collector, a long request) holds the ingestor's fetches, the relay's produces and this probe at once, and the probe says which slow windows began in the broker rather than in the service.\n", probeEvery, sent, fails)
	b.WriteString("- The machine is shared; its busy share is in the column before last (the rest are other processes, including the soak's own producer and consumer), and the last is the share the host gave to other tenants while this machine wanted to run (steal time), which slows every process alike and shows in no process's CPU.\n")
	if len(r.errs) > 0 {
		fmt.Fprintf(&b, "- Sampling errors: %s\n", strings.Join(r.errs, "; "))
	}
	return b.String()
}

// holdText compares claim time, p99 and size before, during and after the
// held snapshot.
func holdText(r *run, p phases) string {
	type agg struct {
		claimMs, claimMax float64
		claims            int64
		sizeMax           int64
	}
	rangeAgg := func(from, to time.Duration) agg {
		var a agg
		var sum float64
		for _, s := range r.samples {
			if s.T > from && s.T <= to {
				sum += s.ClaimMs * float64(s.Claims)
				a.claims += s.Claims
				a.claimMax = max(a.claimMax, s.ClaimMs)
				a.sizeMax = max(a.sizeMax, s.Total())
			}
		}
		if a.claims > 0 {
			a.claimMs = sum / float64(a.claims)
		}
		return a
	}
	before, during, after := rangeAgg(p.baseFrom, p.baseTo), rangeAgg(p.holdFrom, p.holdTo), rangeAgg(p.holdTo, p.end)
	tail := rangeAgg(p.tailFrom, p.end)
	q := func(from, to time.Duration) string { return num(merged(r, from, to).quantile(0.99)) }
	var b strings.Builder
	b.WriteString("| | before (baseline) | during the hold | after the hold | last minutes |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| range | %s–%s | %s–%s | %s–%s | %s–%s |\n", mmss(p.baseFrom), mmss(p.baseTo), mmss(p.holdFrom), mmss(p.holdTo), mmss(p.holdTo), mmss(p.end), mmss(p.tailFrom), mmss(p.end))
	fmt.Fprintf(&b, "| claim ms, mean (worst 10 s) | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) |\n", before.claimMs, before.claimMax, during.claimMs, during.claimMax, after.claimMs, after.claimMax, tail.claimMs, tail.claimMax)
	fmt.Fprintf(&b, "| p99 ms | %s | %s | %s | %s |\n", q(p.baseFrom, p.baseTo), q(p.holdFrom, p.holdTo), q(p.holdTo, p.end), q(p.tailFrom, p.end))
	fmt.Fprintf(&b, "| largest outbox size | %s | %s | %s | %s |\n", mb(before.sizeMax), mb(during.sizeMax), mb(after.sizeMax), mb(tail.sizeMax))
	// How fast claim time comes back: the first sample after the release
	// whose claim time is within 1.5× the baseline.
	back := "not within the run"
	for _, s := range r.samples {
		if s.T > p.holdTo && s.Claims > 0 && s.ClaimMs <= 1.5*before.claimMs {
			back = (s.T - p.holdTo).String()
			break
		}
	}
	fmt.Fprintf(&b, "\nClaim time back within 1.5× the baseline %s after the release (10-s resolution).\n", back)
	if r.hold.began.IsZero() {
		b.WriteString("\nThe snapshot was not taken (see the sampling errors).\n")
	} else {
		fmt.Fprintf(&b, "\nSnapshot held from %s to %s (run time).\n", mmss(r.hold.began.Sub(r.start)), mmss(r.hold.ended.Sub(r.start)))
	}
	return b.String()
}

func num(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	if x >= 100 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}
