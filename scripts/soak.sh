#!/usr/bin/env bash
# make soak / make soak-large: the steady state of both binaries at a constant
# rate for SOAK_MINUTES (default 30) with a short OUTBOX_RETENTION and a held
# snapshot in the middle, or (SOAK_TEST=TestSoakLarge) the 20M-row retained
# table experiment. Writes soak-report.md, soak-samples.csv and
# soak-chart.png at the repository top (or next to SOAK_REPORT). Knobs: see
# scripts/soak/doc.go.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
test="${SOAK_TEST:-TestSoak}"
if [ "$test" = TestSoakLarge ]; then
  export SOAK_REPORT="${SOAK_REPORT:-$root/soak-large-report.md}"
else
  export SOAK_REPORT="${SOAK_REPORT:-$root/soak-report.md}"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A test binary (it reuses pkg/testenv and pkg/e2e) behind the "soak" build
# tag; run directly so that progress streams as it goes.
go test -c -tags soak -o "$tmp/soak.test" ./scripts/soak
minutes="${SOAK_MINUTES:-30}"
timeout=$(awk -v m="$minutes" 'BEGIN { printf "%dm", m + 30 }')
# The 20 M-row build alone took 14 minutes on a busy 2-core machine.
[ "$test" = TestSoakLarge ] && timeout=120m
"$tmp/soak.test" -test.run "^${test}\$" -test.count 1 -test.timeout "$timeout" -test.v
