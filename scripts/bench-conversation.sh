#!/usr/bin/env bash
# The conversation benchmark (docs/performance.md, "Conversation cost at 100
# turns"): installs the Python peer (openai-agents, scripts/openai-agents-deps.sh),
# then runs host/benches/conversation.rs, which prints the table.
#
# NEXO_BENCH_REPEATS sets how many conversations each row's medians are taken
# over (default 11). Extra arguments go to cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/openai-agents-deps.sh
cargo bench -p nexo --bench conversation "$@"
