#!/usr/bin/env bash
# `make fuzz`: runs every cargo-fuzz target (fuzz/) for FUZZ_SECS seconds
# each (default 600), or only those named: scripts/fuzz.sh egress_url skill_md
#
# cargo-fuzz on the stable toolchain: RUSTC_BOOTSTRAP=1 lets it pass its
# -Z flags, and `-s none` skips the sanitizers (ASan needs a nightly std);
# coverage instrumentation (SanitizerCoverage) still works. libfuzzer-sys
# builds libFuzzer from C++ source, so g++ must be installed (apt-get here).
#
# Each target's working corpus is target/fuzz/corpus/NAME, seeded from the
# checked-in fuzz/corpus/NAME, fuzz/regressions/NAME and the repository's
# fixtures; crashes land in target/fuzz/artifacts/NAME/. Each run appends
# its time and executions to fuzz/ledger.tsv (checked in, so a campaign over
# many sessions adds up; FUZZ_LEDGER overrides it), and the script prints
# the totals per target over all runs. A crash becomes a
# regression: minimize it (cargo fuzz tmin), check it in under
# fuzz/regressions/NAME/ (the smoke test in `cargo test` replays it), fix it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt-install.sh

FUZZ_SECS=${FUZZ_SECS:-600}
TARGETS=(skill_md agent_toml config_file agent_manifest model_response egress_url sandbox_paths text_truncate component_load)
[ $# -gt 0 ] && TARGETS=("$@")

command -v g++ >/dev/null 2>&1 || apt_install "libfuzzer-sys (make fuzz)" g++
[ -x /usr/bin/time ] || apt_install "the ledger's cpu seconds (make fuzz)" time
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
# The plugins whose mutants component_load loads. Built before RUSTC_BOOTSTRAP
# is set: it changes every crate's fingerprint, and the normal debug build
# would then be rebuilt from scratch by the next `cargo test`.
if [[ " ${TARGETS[*]} " == *" component_load "* ]]; then
  cargo build -q -p nexo-tests
fi
export RUSTC_BOOTSTRAP=1

seed() {
  local name=$1 dir=$2
  mkdir -p "$dir"
  for d in fuzz/corpus/$name fuzz/regressions/$name; do
    [ -d "$d" ] && cp -n "$d"/* "$dir"/ 2>/dev/null || true
  done
  local i=0
  case $name in
    skill_md) files=$(find plugins/skills skills/tests/fixtures -name SKILL.md) ;;
    agent_toml|agent_manifest) files=$(find examples tests/fixtures -name '*.toml' -not -path '*/target/*') ;;
    config_file) files=$(find examples/web -name '*.toml') ;;
    component_load) files=$(ls target/plugins/wasm32-wasip2/*/{hello,text_stats}.wasm 2>/dev/null | head -2) ;;
    *) files="" ;;
  esac
  for f in $files; do i=$((i + 1)); cp "$f" "$dir/fixture-$i"; done
}

ledger=${FUZZ_LEDGER:-$PWD/fuzz/ledger.tsv}
mkdir -p "$(dirname "$ledger")"
for name in "${TARGETS[@]}"; do
  corpus=target/fuzz/corpus/$name
  artifacts=target/fuzz/artifacts/$name
  seed "$name" "$corpus"
  mkdir -p "$artifacts"
  echo "== fuzz $name for ${FUZZ_SECS}s"
  max_len=16384
  [ "$name" = component_load ] && max_len=$((8 << 20))
  # Built first, so the ledger's seconds are fuzzing time only.
  (cd fuzz && cargo fuzz build -s none -a --target-dir "$CARGO_TARGET_DIR/fuzz-build" "$name")
  log=$(mktemp)
  start=$(date +%s)
  status=0
  cpu=$(mktemp)
  # CPU seconds beside wall seconds: a run that shared the cores says so.
  (cd fuzz && /usr/bin/time -f '%U %S' -o "$cpu" cargo fuzz run -s none -a --target-dir "$CARGO_TARGET_DIR/fuzz-build" "$name" "../$corpus" -- \
    -max_total_time="$FUZZ_SECS" -max_len="$max_len" -timeout=30 -rss_limit_mb=4096 \
    -artifact_prefix="../$artifacts/" -print_final_stats=1) 2>&1 | tee "$log" || status=$?
  # The ledger adds up campaigns over time: one line per run of a target.
  secs=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cpus=$(awk '/^[0-9.]+ [0-9.]+$/ { printf "%d", $1 + $2 }' "$cpu")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$name" "$secs" "${execs:-?}" "${rate:-?}" \
    "$([ "$status" = 0 ] && echo ok || echo "failed ($status)")" "${cpus:-?}" >>"$ledger"
  rm -f "$log" "$cpu"
  [ "$status" = 0 ] || { echo "fuzz $name failed: see $artifacts/" >&2; exit "$status"; }
done
echo "== campaign ledger ($ledger): seconds and executions per target, all runs"
awk -F'\t' '!/^#/ && $4 ~ /^[0-9]+$/ { s[$2] += $3; e[$2] += $4 } END { for (t in s) printf "%-16s %8d s %14d execs\n", t, s[t], e[t] }' "$ledger" | sort
