#!/usr/bin/env bash
# `make bench-startup`: a whole `nexo run` process of a cached component
# against `nexo --version`, timed by hyperfine in one run. Prints both, and
# the ratio of the medians. The run records nothing (`--ephemeral` is timed
# too, as the third command) and uses a throw-away cache and store.
#   RUNS=200 scripts/bench-startup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt-install.sh
command -v hyperfine >/dev/null 2>&1 || apt_install "hyperfine (make bench-startup)" hyperfine
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
cargo build -q --release -p nexo
NEXO=$CARGO_TARGET_DIR/release/nexo
"$NEXO" build plugins/agents/text-stats --target-dir target/plugins >/dev/null 2>&1
WASM=target/plugins/wasm32-wasip2/release/text_stats.wasm
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export NEXO_CACHE_DIR=$WORK/cache
STORE=$WORK/runs.db
# Warm the compile cache and create the store: start-up, not compilation, is measured.
"$NEXO" run "$WASM" "a b c" --store "$STORE" >/dev/null
RUNS=${RUNS:-100}
hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$WORK/startup.json" \
  -n version "$NEXO --version" \
  -n run "$NEXO run $WASM 'a b c' --store $STORE" \
  -n ephemeral "$NEXO run $WASM 'a b c' --ephemeral"
python3 - "$WORK/startup.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
v = r["version"]["median"]
print("\n| command | median | ÷ --version |")
print("|---|---:|---:|")
for name in ("version", "run", "ephemeral"):
    m = r[name]["median"]
    print(f"| {name} | {m*1000:.2f} ms | {m/v:.2f}× |")
PY
