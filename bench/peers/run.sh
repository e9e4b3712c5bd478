#!/usr/bin/env bash
# WASM plugin-host peer baseline: builds the two guests and the two host
# benchmarks (cargo is incremental, so this is quick once built), runs both
# hosts one after the other, then nexo's own host on the same guest work
# (`cargo bench -p nexo --bench peers`, skipped with NEXO=0), and prints one
# markdown table with each row's ratio to the floor and Extism's ratio to it.
# `make bench-peers` runs it.
#
# Env knobs: BATCHES (15), BATCH_MS (100), WARMUP_MS (300) per measurement;
# METRICS=a,b,c (default all) picks metrics; N_HOST_CALLS (1000) for metric c;
# KEEP_RESIDENT=<bytes> (0) for wasmtime's pooling configs; PERFMAP=1 writes
# /tmp/perf-<pid>.map for `perf report`; PIN_CPU=<n> runs the hosts under
# `taskset -c n`; PEERS_TARGET (target/peers/hosts), GUEST_TARGET
# (target/peers/guests), LOGS (target/peers/logs) hold all build outputs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# The peers' own target dir: their lock files differ from nexo's, so they
# must not share one (nexo's bench keeps the workspace's CARGO_TARGET_DIR).
PEERS_TARGET=${PEERS_TARGET:-$REPO/target/peers/hosts}
GUEST_TARGET=${GUEST_TARGET:-$REPO/target/peers/guests}
LOGS=${LOGS:-$REPO/target/peers/logs}
mkdir -p "$LOGS"

EXTISM_WASM=$GUEST_TARGET/extism/wasm32-unknown-unknown/release/extism_guest.wasm
WT_WASM=$GUEST_TARGET/wasmtime/wasm32-wasip2/release/wasmtime_guest.wasm
EXTISM_BIN=$PEERS_TARGET/release/extism-bench
WT_BIN=$PEERS_TARGET/release/wasmtime-bench

# Prerequisites: rustup's cargo (hosts) and Debian's Rust 1.96 "web" toolchain
# with the std sources and wasi-libc (guests).
command -v cargo >/dev/null || { echo "need rustup's cargo on PATH" >&2; exit 1; }
if [ ! -x /usr/bin/cargo ] || [ ! -d /usr/lib/rustlib/src/rust/library ] || [ ! -f /usr/lib/wasm32-wasi/libc.a ]; then
  echo "need Debian's wasm toolchain: apt-get install rustc-web cargo-web rust-web-src wasi-libc" >&2; exit 1
fi
# Use the Cargo.lock next to a manifest when there is one (reproducible deps).
locked() { [ -f "$1/Cargo.lock" ] && echo --locked || true; }

run_logged() { # log-file command...
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $* (last lines of $log):" >&2; tail -30 "$log" >&2; exit 1
  fi
}

# Guests: Debian's rustc (it has the wasm std sources) with build-std; rustup's
# stable here has only the x86_64 target. Each guest is its own workspace.
build_guest() { # crate-dir target-subdir rust-target rustflags
  echo "building guest $1 ($3) ..." >&2
  run_logged "$LOGS/guest-$2.log" env -C "$HERE/guests/$1" \
    RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 RUSTFLAGS="$4" \
    CARGO_TARGET_DIR="$GUEST_TARGET/$2" \
    /usr/bin/cargo build --release $(locked "$HERE/guests/$1") -Zbuild-std=std,panic_abort --target "$3"
}
build_guest extism-guest extism wasm32-unknown-unknown ""
build_guest wasmtime-guest wasmtime wasm32-wasip2 "-C link-self-contained=no -L /usr/lib/wasm32-wasi"

# Hosts: rustup's cargo (rustc 1.95). A build from nothing takes ~10 min on 2 cores.
echo "building hosts (log: $LOGS/hosts-build.log) ..." >&2
run_logged "$LOGS/hosts-build.log" env CARGO_TARGET_DIR="$PEERS_TARGET" cargo build --release $(locked "$HERE/hosts") --manifest-path "$HERE/hosts/Cargo.toml"

PIN=()
if [ -n "${PIN_CPU:-}" ]; then PIN=(taskset -c "$PIN_CPU"); fi
RESULTS=$LOGS/results.tsv
: >"$RESULTS"
echo "running extism-bench ..." >&2
"${PIN[@]}" "$EXTISM_BIN" "$EXTISM_WASM" >>"$RESULTS" 2>"$LOGS/extism-bench.err" \
  || { cat "$LOGS/extism-bench.err" >&2; exit 1; }
echo "running wasmtime-bench ..." >&2
"${PIN[@]}" "$WT_BIN" "$WT_WASM" >>"$RESULTS" 2>"$LOGS/wasmtime-bench.err" \
  || { cat "$LOGS/wasmtime-bench.err" >&2; exit 1; }
if [ "${NEXO:-1}" != 0 ]; then
  # nexo's host: the same timing loop (the bench includes hosts/common/timing.rs)
  # over plugins/testing/bench-guest, through nexo's engine, authority and host-call path.
  echo "running nexo's bench (cargo bench -p nexo --bench peers) ..." >&2
  (cd "$REPO" && "${PIN[@]}" cargo bench -q -p nexo --bench peers) >>"$RESULTS" 2>"$LOGS/nexo-bench.err" \
    || { tail -40 "$LOGS/nexo-bench.err" >&2; exit 1; }
fi

echo
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(uname -r)"
echo "hosts: $(rustc --version); guests: $(/usr/bin/rustc --version); guest sizes: extism $(stat -c %s "$EXTISM_WASM") B, wasmtime $(stat -c %s "$WT_WASM") B"
echo "per measurement: ${BATCHES:-15} batches of ~${BATCH_MS:-100} ms; median and spread are over the batch means${PIN_CPU:+; pinned to CPU $PIN_CPU}"
echo
# "÷ floor": the row's median over raw wasmtime's for the same metric, pooled
# with concurrency_support(false) (the lean floor); "Extism ÷ this": Extism
# pooled over the row. Metrics match on their key (the text before ':').
awk -F'\t' '
  function fmt(ns) { return ns >= 1000 ? sprintf("%.2f µs", ns / 1000) : sprintf("%.1f ns", ns) }
  function key(m) { sub(/:.*/, "", m); return m }
  $1 == "RESULT" {
    n++; host[n] = $2; cfg[n] = $3; metric[n] = $4; med[n] = $5; q1[n] = $6; q3[n] = $7; lo[n] = $8; hi[n] = $9; it[n] = $10
    if ($2 ~ /^wasmtime/ && $3 == "pooling, concurrency_support(false)") floor[key($4)] = $5
    if ($2 ~ /^extism/ && $3 == "pooling") extism[key($4)] = $5
  }
  END {
    print "| host | allocator | metric | median | IQR (q1–q3) | min–max | batches×iters | ÷ floor | Extism ÷ this |"
    print "|---|---|---|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= n; i++) {
      k = key(metric[i])
      f = (k in floor) ? sprintf("%.2f×", med[i] / floor[k]) : "–"
      e = (k in extism) ? sprintf("%.1f×", extism[k] / med[i]) : "–"
      printf "| %s | %s | %s | %s | %s–%s | %s–%s | %s | %s | %s |\n", host[i], cfg[i], metric[i], fmt(med[i]), fmt(q1[i]), fmt(q3[i]), fmt(lo[i]), fmt(hi[i]), it[i], f, e
    }
  }' "$RESULTS"
