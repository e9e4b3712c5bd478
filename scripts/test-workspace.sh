#!/usr/bin/env bash
# Runs the workspace's tests against the tests' own PostgreSQL server, then
# lists every test, or part of one, that did not run and why: libtest hides
# a passing test's output, so each skip also goes to target/skipped.txt
# (nexo-testkit's `skipped`), and this prints that file at the end. `make
# test` calls it.
set -uo pipefail
cd "$(dirname "$0")/.."
url=$(./scripts/postgres.sh) || exit 1
skipped="$PWD/target/skipped.txt"
rm -f "$skipped"
NEXO_SKIPPED="$skipped" NEXO_TEST_POSTGRES="$url" "${CARGO:-cargo}" test --workspace --no-fail-fast
status=$?
if [ -s "$skipped" ]; then
  echo "== $(sort -u "$skipped" | wc -l) tests or parts of tests did not run (a count before a line: that many times):"
  sort "$skipped" | uniq -c | sed -E 's/^ +1 /  /; s/^ +([0-9]+) /  \1x /'
else
  echo "== no test was skipped"
fi
exit "$status"
