#!/usr/bin/env bash
# Validates docs/asyncapi.yaml with the AsyncAPI CLI pinned by
# package-lock.json (make lint). The CLI is installed with `npm ci` into
# scripts/asyncapi/node_modules (gitignored), again whenever the lock file
# changes. The JSON Schemas the document references are draft 2020-12, which
# the CLI resolves but does not check: check-schemas.js compiles them with ajv
# (strict), and pkg/contractschema's Go tests hold the service to them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if ! command -v npm >/dev/null 2>&1; then
  echo "asyncapi: npm not found; install Node.js 20 and npm (.ci/run does)" >&2
  exit 1
fi

stamp="$here/node_modules/.package-lock.sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ ! -x "$here/node_modules/.bin/asyncapi" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "asyncapi: npm ci (pinned @asyncapi/cli)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
fi

# The CLI sends usage metrics unless told not to; its settings file lives
# with the install, not in $HOME.
metrics="$here/node_modules/.asyncapi-analytics"
[ -f "$metrics" ] || echo '{"analyticsEnabled":"false","infoMessageShown":"true","userID":"disabled"}' >"$metrics"
export ASYNCAPI_METRICS_CONFIG_PATH="$metrics" SUPPRESS_NO_CONFIG_WARNING=1 NODE_CONFIG_DIR="$here"

node "$here/check-schemas.js"
cd "$root"
exec "$here/node_modules/.bin/asyncapi" validate --fail-severity=warn docs/asyncapi.yaml
