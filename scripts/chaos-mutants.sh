#!/usr/bin/env bash
# The chaos harness's mutation check: builds nexo with a guarantee broken on
# purpose and runs the harness against it, which must then fail. Each mutant
# is a copy of HEAD in target/chaos-mutants/NAME with a few lines changed; a
# line that no longer matches the source stops the script (the mutant would
# test nothing).
#
#   scripts/chaos-mutants.sh [NAME…]     (default: every mutant)
#
# Mutants:
#   live-leases  a node takes over runs whose leases are still live: two
#                nodes drive one run at once
#
# (A mutant whose writes skip the lease holder's check is not one: the
# journal's key still refuses the stale node's entry, so nothing runs twice
# and the harness rightly passes; measured in docs/durable.md.)
#
# NEXO_CHAOS_SECS and NEXO_CHAOS_SEED pass through to the harness.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
say() { echo "chaos-mutants.sh: $*" >&2; }

# FILE OLD NEW: replaces a fixed string that must be there.
mutate() {
  local file="$1" old="$2" new="$3"
  python3 - "$file" "$old" "$new" <<'EOF'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if old not in text:
    sys.exit(f"chaos-mutants.sh: {path} no longer holds {old!r}: update the mutant")
open(path, "w").write(text.replace(old, new))
EOF
}

apply() {
  case "$1" in
    live-leases)
      mutate store/src/sql.rs "FROM jobs WHERE status = 'running' AND lease_until_ms < \$1 ORDER BY" "FROM jobs WHERE status = 'running' AND lease_until_ms < \$1 + 600000 ORDER BY"
      mutate store/src/runs.rs "run.status == RunStatus::Running && run.lease.as_ref().is_none_or(|l| l.until_ms < now_ms)" "run.status == RunStatus::Running"
      ;;
    *) say "no mutant named $1"; exit 2 ;;
  esac
}

mutants=("$@")
[ ${#mutants[@]} -gt 0 ] || mutants=(live-leases)
failed_as_expected=()
for name in "${mutants[@]}"; do
  dir="$root/target/chaos-mutants/$name"
  rm -rf "$dir"
  git worktree prune
  git worktree add -q --detach "$dir" HEAD
  (cd "$dir" && apply "$name")
  # Its own target directory, seeded with hard links: only nexo's crates build again.
  target="$root/target/chaos-mutants/target-$name"
  if [ ! -d "$target/debug" ] && [ -d "$root/target/debug" ]; then
    mkdir -p "$target" && cp -al "$root/target/debug" "$target/debug" && rm -f "$target/debug/.cargo-lock"
  fi
  say "$name: building"
  (cd "$dir" && CARGO_TARGET_DIR="$target" cargo build -q -p nexo)
  say "$name: running the harness against it"
  # The scene with several nodes: a run driven twice needs another node.
  if NEXO_BIN="$target/debug/nexo" cargo test -q -p nexo --test chaos three_nodes -- --nocapture >"$target.log" 2>&1; then
    say "$name: the harness PASSED against a broken nexo: it does not catch this ($target.log)"
    git worktree remove --force "$dir"
    exit 1
  fi
  # It must fail by its checks, not for another reason.
  # (A run that never ends is one: every run must end.)
  if ! grep -qE "^chaos \(seed [0-9]+\): .* [1-9][0-9]* violations$|runs did not end within" "$target.log"; then
    say "$name: the harness failed, but not by finding violations: see $target.log"
    git worktree remove --force "$dir"
    exit 1
  fi
  grep -E "^chaos \(seed|^t[0-9]+:|runs did not end within" "$target.log" | cut -c1-300 | head -12 >&2 || true
  failed_as_expected+=("$name")
  git worktree remove --force "$dir"
done
say "every mutant was caught: ${failed_as_expected[*]}"
