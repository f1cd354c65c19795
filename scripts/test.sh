#!/usr/bin/env bash
# make test: every unit and integration test with -race, verbose into
# .cache/test.log; the terminal gets one line per top-level test, the package
# summaries, the resilience figures, and on failure the failing tests' output.
# ./... includes scripts/imagetest (builds the image and runs it with podman;
# IMAGE_TEST=off skips it).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
log=.cache/test.log
flags=${TEST_FLAGS:--race -count=1 -timeout 20m -p 2}

# scripts/promtest needs the chart's rendered rules and scrape settings
# (helm); render them once here rather than inside the test's timeout.
if [ -z "${PCP_MONITORING_DIR:-}" ]; then
  PCP_MONITORING_DIR=$(mktemp -d)
  trap 'rm -rf "$PCP_MONITORING_DIR"' EXIT
  if ! bash scripts/chart-check.sh --monitoring-out "$PCP_MONITORING_DIR" >.cache/monitoring-render.log 2>&1; then
    echo "test.sh: rendering the chart's monitoring failed (.cache/monitoring-render.log); scripts/promtest will retry and fail"
    unset PCP_MONITORING_DIR
  fi
fi
export PCP_MONITORING_DIR

# shellcheck disable=SC2086
go test $flags -v "${@:-./...}" >"$log" 2>&1
rc=$?

grep -E '^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:|[a-z-]+: produced=)' "$log"
if [ $rc -ne 0 ]; then
  echo
  echo "== output of failing tests (full log: $log) =="
  awk '/^=== RUN/{buf=""} {buf=buf $0 "\n"} /^[ \t]*--- FAIL/{print buf; buf=""}' "$log" | tail -n 300
  grep -E '^(panic:|fatal error:)' -A 40 "$log" | head -n 120
  # A package can fail with every test passed: a race or a goroutine leak
  # found after its tests (testenv.VerifyNoLeaks), reported outside any test.
  grep -E '^(WARNING: DATA RACE|testenv: goroutines leaked)' -A 60 "$log" | head -n 200
fi
# Last, so that a view of the output's end (CI shows its tail) names what
# failed: every failing test and subtest with the last lines it logged from
# a source file, which hold its errors. Parallel subtests interleave in -v
# output; the "=== RUN/CONT/NAME" markers say whose lines follow.
if [ $rc -ne 0 ]; then
  echo
  echo "== failing tests, each with its last logged lines =="
  awk '
    /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
    /^ *--- FAIL: / { failed[++nf] = $3; next }
    /^ +[A-Za-z0-9_]+\.go:[0-9]+: / { n[cur]++; line[cur, n[cur]] = substr($0, 1, 400) }
    END {
      for (i = 1; i <= nf; i++) {
        name = failed[i]
        print "FAIL " name
        for (j = (n[name] > 8 ? n[name] - 7 : 1); j <= n[name]; j++) print line[name, j]
      }
    }' "$log"
fi
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $rc
