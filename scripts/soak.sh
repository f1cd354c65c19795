#!/usr/bin/env bash
# make soak / make soak-large: the steady state of both binaries at a constant
# rate for SOAK_MINUTES (default 30) with a short OUTBOX_RETENTION and a held
# snapshot in the middle, or (SOAK_LARGE=1, scripts/soak -large) the 20M-row
# retained table experiment. The steady state writes soak-report.md,
# soak-samples.csv and soak-chart.png at the repository top (or next to
# SOAK_REPORT); the experiment writes soak-large-report.md. Knobs: see
# scripts/soak/doc.go.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
case "${SOAK_LARGE:-0}" in
  1) large=true ;;
  0) large=false ;;
  *) echo "soak.sh: SOAK_LARGE=${SOAK_LARGE}: want 1 (make soak-large) or 0 (make soak)" >&2; exit 2 ;;
esac
if [ "$large" = true ]; then
  export SOAK_REPORT="${SOAK_REPORT:-$root/soak-large-report.md}"
else
  export SOAK_REPORT="${SOAK_REPORT:-$root/soak-report.md}"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A program (scripts/soak, on pkg/testenv and pkg/e2e), run directly so that
# progress streams as it goes.
go build -o "$tmp/" ./scripts/soak
minutes="${SOAK_MINUTES:-30}"
# The dev broker keeps every record in memory unless told otherwise: an
# hour of input and events at the default rate is a few GB.
export DEVBROKER_RETENTION="${DEVBROKER_RETENTION:-1h}"
timeout=$(awk -v m="$minutes" 'BEGIN { printf "%dm", m + 30 }')
# The 20 M-row build alone took 14 minutes on a busy 2-core machine.
if [ "$large" = true ]; then timeout=120m; fi
"$tmp/soak" -large="$large" -timeout "$timeout"
