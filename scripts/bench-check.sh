#!/usr/bin/env bash
# `make bench-check`: the regression guard. Builds the core benches of the
# work tree and of a base commit (default: HEAD~1 when the tree is clean,
# else HEAD, i.e. "what this change does"), runs them interleaved in one
# invocation (base, current, base, current), and fails if any benchmark's
# best median is more than BENCH_LIMIT percent (default 10) slower than the
# base's. Ratios measured side by side survive a noisy machine; absolute
# numbers from another day would not.
#
#   scripts/bench-check.sh            # against HEAD~1 (or HEAD if dirty)
#   BENCH_BASE=main~3 scripts/bench-check.sh
#
# Benches: engine (cache-hit and instantiate groups), agent_loop and peers
# (the peer harness's loop over bench-guest). A bench the base lacks is
# reported and skipped. The base builds into its own target directory
# (target/bench-check/target, kept between runs): cargo hashes a workspace
# crate by its path relative to the workspace, so two trees sharing one
# target directory overwrite each other's artifacts and the second build
# takes the first's as fresh (it would compare a tree with itself, and leave
# the base's binaries where `cargo build` expects the work tree's).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LIMIT=${BENCH_LIMIT:-10}
ROUNDS=${BENCH_ROUNDS:-2}
if [ -n "${BENCH_BASE:-}" ]; then base=$BENCH_BASE
elif [ -z "$(git status --porcelain --untracked-files=no)" ]; then base=HEAD~1
else base=HEAD; fi
base_rev=$(git rev-parse --short "$base")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$CARGO_TARGET_DIR/bench-check
# The base's tree is extracted afresh, but its target/plugins stays: the
# base's cargo target directory is kept, and a build script that does not
# run again (nothing it watches changed) would point at plugins deleted.
mkdir -p "$WORK/base"
find "$WORK/base" -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} +
rm -rf "$WORK/criterion" "$WORK/results"
mkdir -p "$WORK/results"
git archive "$base" | tar -x -C "$WORK/base"
echo "bench-check: work tree against $base ($base_rev), limit +$LIMIT%, $ROUNDS rounds each" >&2

# Both trees build their example guests with the work tree's toolchains
# (`make bench-check` installs them under target/tools): the base's tree
# has none of its own.
export NEXO_COMPONENTIZE_PY=${NEXO_COMPONENTIZE_PY:-$ROOT/target/tools/python/bin/componentize-py}
export NEXO_COMPONENTIZE_JS=${NEXO_COMPONENTIZE_JS:-$ROOT/target/tools/js/node_modules/.bin/componentize-js}

BENCHES=(engine agent_loop peers)
# Prints "name<TAB>executable" for each bench the tree at $1 has; the
# plugins of each tree build into its own target/plugins.
build() {
  local tree=$1 target=$2 args=()
  for b in "${BENCHES[@]}"; do
    [ -f "$tree/host/benches/$b.rs" ] && args+=(--bench "$b")
  done
  (cd "$tree" && CARGO_TARGET_DIR="$target" NEXO_PLUGIN_TARGET_DIR="$tree/target/plugins" cargo bench -q -p nexo "${args[@]}" --no-run \
    --message-format=json-render-diagnostics) |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["target"]["name"] + "\t" + m["executable"])'
}
echo "building the base ($base_rev) ..." >&2
build "$WORK/base" "$WORK/target" >"$WORK/base.list"
echo "building the work tree ..." >&2
build "$ROOT" "$CARGO_TARGET_DIR" >"$WORK/current.list"

# One round of one side: criterion benches keep their estimates under their
# own CRITERION_HOME; peers prints the harness's RESULT lines.
run_side() { # side round
  local side=$1 round=$2 name exe
  while IFS=$'\t' read -r name exe; do
    case $name in
      peers)
        BATCHES=10 BATCH_MS=50 WARMUP_MS=200 "$exe" >"$WORK/results/$side-$round-peers.tsv" 2>/dev/null ;;
      engine)
        CRITERION_HOME="$WORK/criterion/$side-$round" "$exe" --bench 'cache-hit|instantiate/' \
          --warm-up-time 1 --measurement-time 2 --noplot >/dev/null 2>&1 ;;
      *)
        CRITERION_HOME="$WORK/criterion/$side-$round" "$exe" --bench \
          --warm-up-time 1 --measurement-time 2 --noplot >/dev/null 2>&1 ;;
    esac
  done <"$WORK/$side.list"
}
for round in $(seq "$ROUNDS"); do
  echo "round $round: base ..." >&2; run_side base "$round"
  echo "round $round: current ..." >&2; run_side current "$round"
done

python3 - "$WORK" "$LIMIT" "$base_rev" <<'PY'
import glob, json, os, sys
work, limit, base_rev = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def collect(side):
    best = {}
    for run in glob.glob(f"{work}/criterion/{side}-*"):
        for est in glob.glob(f"{run}/**/new/estimates.json", recursive=True):
            d = os.path.dirname(os.path.dirname(est))
            with open(os.path.join(d, "new", "benchmark.json")) as f:
                name = json.load(f)["full_id"]
            with open(est) as f:
                ns = json.load(f)["median"]["point_estimate"]
            best[name] = min(best.get(name, ns), ns)
    for tsv in glob.glob(f"{work}/results/{side}-*-peers.tsv"):
        for line in open(tsv):
            p = line.rstrip("\n").split("\t")
            if p[0] == "RESULT":
                name = f"peers/{p[2]}/{p[3]}"
                best[name] = min(best.get(name, float(p[4])), float(p[4]))
    return best
base, cur = collect("base"), collect("current")
fmt = lambda ns: f"{ns/1000:.2f} µs" if ns >= 1000 else f"{ns:.1f} ns"
worse = []
print(f"| benchmark | base {base_rev} | work tree | change |")
print("|---|---:|---:|---:|")
for name in sorted(cur):
    if name not in base:
        print(f"| {name} | – | {fmt(cur[name])} | new |")
        continue
    change = (cur[name] / base[name] - 1) * 100
    flag = " **slower**" if change > limit else ""
    print(f"| {name} | {fmt(base[name])} | {fmt(cur[name])} | {change:+.1f}%{flag} |")
    if change > limit:
        worse.append(name)
for name in sorted(set(base) - set(cur)):
    print(f"| {name} | {fmt(base[name])} | – | gone |")
if not cur:
    sys.exit("bench-check: no results from the work tree")
if worse:
    sys.exit(f"bench-check: {len(worse)} benchmark(s) more than {limit:g}% slower than {base_rev}: " + ", ".join(worse))
print(f"\nbench-check: no benchmark is more than {limit:g}% slower than {base_rev}")
PY
