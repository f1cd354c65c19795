// Soak is the steady-state run behind `make soak` (scripts/soak.sh):
// both binaries as real processes at a constant input rate for a long time,
// with a short OUTBOX_RETENTION so that every outbox row goes through
// insert → claim → mark → delete many times within the run, on a local
// PostgreSQL with fsync on and default server settings, and the dev broker.
// `make soak-large` (soak -large) is the large retained table experiment.
//
// Like scripts/bench it is a program: pkg/testenv (PostgreSQL cluster, broker
// process) and pkg/e2e (the binaries as child processes) hand out their
// services to a testing.TB, which scripts/internal/progtb provides; the CPU
// readers are scripts/internal/machine's. scripts/soak.sh builds and runs it
// (flags: -large, -timeout); `make test` builds it and runs its unit tests.
//
// # What a soak does
//
//   - load.go: produces valid passports (pkg/passportgen) at SOAK_RATE
//     per second and consumes both output topics; the latency of each output
//     record (receive − send of its passport) goes into a histogram of the
//     10-second window it arrived in.
//   - sampler.go: every 10 s, the window's latency percentiles, input
//     lag, pending rows and the oldest pending age, the outbox's heap, index
//     and TOAST sizes, live and dead tuples, autovacuum runs, WAL bytes, the
//     mean claim time (pg_stat_statements), the age of the oldest snapshot,
//     the checkpoints begun and the write and sync time of those that
//     ended, the ingestor's commits over 100 ms (its committed stage), the
//     slowest acknowledgement of the broker probe (brokerprobe.go: a record
//     produced every 20 ms beside the load, to time the broker itself), and
//     the CPU of the ingestor, the relay and all of PostgreSQL.
//   - hold.go: at SOAK_HOLD_START one REPEATABLE READ transaction takes a
//     snapshot and keeps it for SOAK_HOLD — the forgotten psql session or
//     hour-long report query that holds vacuum's xmin horizon back.
//   - verdict.go: the targets of issue 12 item 4, PASS/FAIL each.
//   - report.go and chart.go: soak-report.md (per-minute table,
//     targets, machine state), soak-samples.csv and soak-chart.png, named
//     after the report (p99, pending and outbox size over time); slow.go:
//     what the windows of p99 over 100 ms coincide with.
//
// # Knobs (environment)
//
// SOAK_RATE (passports/s; default half of the default ingest rate in the
// bench-report.md that the last make bench wrote), SOAK_MINUTES (30), SOAK_RETENTION (OUTBOX_RETENTION,
// 2m), SOAK_HOLD (5m; 0 = no hold), SOAK_HOLD_START (default: the hold is
// centred in the run), SOAK_REPORT (soak-report.md at the repository top;
// the CSV and chart are written next to it), SOAK_RELAY_ENV (extra
// space-separated NAME=value settings for the relay), SOAK_PG_SETTINGS
// (space-separated name=value server settings, e.g. autovacuum_naptime=10s),
// SOAK_SAMPLE (10s: the sampling step),
// DEVBROKER_RETENTION (make soak: 1h; the dev broker drops records older
// than it, so that an hours-long soak does not hold every record in its
// memory; an input lag older than it would lose input, as on a real
// broker). make soak-large: SOAK_LARGE_ROWS (20,000,000), SOAK_LARGE_BACKLOG
// (200,000), SOAK_LARGE_RUNS (4: one run's spread on a shared 2-core
// machine exceeded the 10 % being tested with 2).
package main
