// Command bench is the throughput and latency benchmark behind `make bench`
// (scripts/bench.sh builds and runs it). It needs several minutes of an
// otherwise idle machine, so `make test` does not run it.
//
// One file per phase (ingest.go, ceiling_ingest.go, relay.go,
// ceiling_relay.go, ceiling_relaydb.go, latency.go, floor.go, backlog.go),
// each a [phase] in main.go's list: a name for BENCH_ONLY, a share of the
// time budget and a function that repeats its runs until its deadline;
// sampler.go observes each run (CPU per process, PostgreSQL wait events,
// also per second for a latency run's slow seconds), batchshape.go the
// ingestor's transactions per second during a latency run, diskprobe.go
// the disk's fdatasync times during a latency run, measure.go is the
// stream-and-consume measurement the latency and floor phases share,
// clients.go the bench's own Kafka clients and their settings, rows.go the
// service's rows built for the ceilings, budget.go the stage budget read
// from the binaries' /metrics, targets.go issue 13's targets against the
// ceilings, report.go the table and bench-report.md, infra.go the shared
// topic and database chores. The harness is pkg/e2e's and pkg/testenv's
// (scripts/internal/progtb adapts their testing.TB parameter to a program).
//
// # Overview
//
// Everything runs as in production, on one machine: a local PostgreSQL
// cluster with fsync, synchronous_commit and full_page_writes on
// (testenv.NewPostgresCluster with Fsync), the development broker
// (scripts/devbroker, kfake) as a child process, and the service's two
// binaries (built by the rig, or taken from RIG_BINARIES) as real processes
// (pkg/e2e's harness). It measures
//
//   - ingest passports/s with INGEST_BATCH_SIZE=1 and with the default, on a
//     pre-filled input topic, from the first committed offset until the
//     committed offsets reach the end, on a fresh database per run;
//   - relay events/s with the seed settings (OUTBOX_BATCH_SIZE=50,
//     OUTBOX_POLL_INTERVAL=1s) and with the defaults, from the first
//     published row until every row is PUBLISHED, on a copy of a database the
//     ingestor filled;
//   - end-to-end latency, input produced → output record consumed, at a
//     steady 1,000 and 4,000 passports/s for 30 s each with both binaries
//     running, and the latency budget: the binaries' stage histograms
//     (route_passport_stage_seconds) over the run, plus the last hop; the
//     runs write into recycled WAL segments (wal.go);
//   - the time to drain a 200,000-row backlog;
//
// and, in the same run, what bounds each figure:
//
//   - the ingest ceiling: the same rows written by the bench alone (COPY
//     into temporary tables, INSERT … SELECT … ON CONFLICT, 1,000 passports
//     per transaction, two connections);
//   - the relay ceiling: the same records produced by a producer with the
//     relay's settings, without the database;
//   - the relay's database bound: pkg/relay's own code on a copy of the same
//     database, with a publisher that acknowledges at once (no Kafka);
//   - the latency floor: the two Kafka hops alone at the same rates;
//   - the disk under the commits: an 8-kB write and fdatasync beside the
//     cluster's data directory every 50 ms during each latency run.
//
// Each figure is the median of several runs (BENCH_RUNS, default 3; fewer
// when the time budget runs short, and the table says how many). Ratios are
// taken within a run, then the median of the ratios is reported. Missing a
// target is reported, never a failure. The table is printed and written to
// BENCH_REPORT (bench-report.md at the repository top by default), together
// with what was observed during each phase (CPU per process, PostgreSQL wait
// events) to explain the bottlenecks.
package main
