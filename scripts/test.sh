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

# shellcheck disable=SC2086
go test $flags -v "${@:-./...}" >"$log" 2>&1
rc=$?

grep -E '^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:|[a-z-]+: produced=)' "$log"
if [ $rc -ne 0 ]; then
  echo
  echo "== output of failing tests (full log: $log) =="
  awk '/^=== RUN/{buf=""} {buf=buf $0 "\n"} /^\s*--- FAIL/{print buf; buf=""}' "$log" | tail -n 300
  grep -E '^(panic:|fatal error:)' -A 40 "$log" | head -n 120
fi
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $rc
