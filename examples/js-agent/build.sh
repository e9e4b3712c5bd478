#!/usr/bin/env bash
# Builds js_agent.wasm (or the path given) from agent.js against ../../wit.
# Needs ComponentizeJS 0.23 (npm): ../../scripts/js-deps.sh installs it into
# target/tools/js; $NEXO_COMPONENTIZE_JS or PATH also work.
set -euo pipefail
cd "$(dirname "$0")"
TOOL="${NEXO_COMPONENTIZE_JS:-../../target/tools/js/node_modules/.bin/componentize-js}"
if [ ! -x "$TOOL" ]; then
  TOOL=$(command -v componentize-js) || {
    echo "error: ComponentizeJS is not installed: run ../../scripts/js-deps.sh" >&2
    exit 1
  }
fi
# Without -d http -d fetch-event the component imports wasi:http, which nexo does not provide.
exec "$TOOL" agent.js --wit ../../wit --world-name agent-plugin -d http -d fetch-event -o "${1:-js_agent.wasm}"
