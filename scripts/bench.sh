#!/usr/bin/env bash
# make bench: throughput and latency of the two binaries as real processes,
# on a local PostgreSQL (fsync on) and the dev broker. One command, one table;
# the table is also written to bench-report.md at the repository top (or to
# BENCH_REPORT). Missing a target is reported, not a failure.
#
# Knobs (environment): BENCH_RUNS (3), BENCH_INGEST_RUNS (5, or BENCH_RUNS when
# only that is set: the ingest phase's paired runs), BENCH_INGEST_N (25000),
# BENCH_PER_MESSAGE_CAP (10s), BENCH_E2E_RATES (1000,4000), BENCH_E2E_DURATION
# (30s), BENCH_E2E_WARMUP (10s at the rate before each latency and floor run,
# not counted; 0: none), BENCH_FLOOR_DURATION (15s), BENCH_BACKLOG_ROWS (200000), BENCH_BUDGET
# (16m), BENCH_RELAY_LINGER (0s: the relay's linger.ms for the stand-ins of its
# producer), BENCH_ONLY (phases: ingest, ingest-ceiling, relay, relay-ceiling, relay-db,
# latency, floor, backlog; relay, relay-db and backlog need ingest), BENCH_SERVICE_ENV
# (NAME=value,... added to both binaries, e.g. INGEST_BATCH_MAX_WAIT=5ms,
# to set a setting against the defaults), BENCH_DB_SQL (SQL run in every
# database of the phases after its migration, e.g. alter table
# route_passport_outbox set (autovacuum_vacuum_cost_delay = 2)), RIG_BINARIES (a directory with prebuilt
# ingestor and outbox-relay, e.g. of an older commit, measured instead of
# this tree's; also for make soak). A quick look:
#   BENCH_RUNS=1 BENCH_INGEST_N=5000 BENCH_E2E_DURATION=5s \
#   BENCH_FLOOR_DURATION=5s BENCH_REPORT=/tmp/bench.md make bench
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export BENCH_REPORT="${BENCH_REPORT:-$root/bench-report.md}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The benchmark is a program (scripts/bench, on pkg/testenv and pkg/e2e).
go build -o "$tmp/" ./scripts/bench
start=$(date +%s)
"$tmp/bench"
echo "bench: done in $(( $(date +%s) - start ))s; table above, report in ${BENCH_REPORT#$root/}"
