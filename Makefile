# The two commands a fresh machine needs:
#   make demo   build nexo and the bundled plugins, inspect them, run an agent
#   make test   every test (builds the plugins itself)
# Both install the wasm toolchain first if it is missing (scripts/wasm-toolchain.sh);
# `make test` also installs bubblewrap, componentize-py, ComponentizeJS, the MCP servers and the
# console test's chromium and playwright-core, podman with its test image, the OTLP receiver's
# opentelemetry-proto, prometheus and wkg (scripts/*-deps.sh),
# and starts a PostgreSQL server in target/postgres (scripts/postgres.sh).

CARGO ?= cargo
PLUGIN_OUT := target/plugins
# One host for the plugins, the demo and `make install`: the release build.
NEXO := target/release/nexo
CARGO_BIN := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin

# `make test` runs the chaos harness for 30 s of faults per scene; `make chaos` for five
# minutes, then checks that the harness catches nexo with fencing or leases broken.
.PHONY: chaos demo test toolchain plugins install bench bench-peers bench-check bench-startup bench-conversation bench-serve lint fmt fuzz

toolchain:
	./scripts/wasm-toolchain.sh

plugins: toolchain
	$(CARGO) build -q --release -p nexo
	$(NEXO) build plugins/agents/text-stats --target-dir $(PLUGIN_OUT)
	$(NEXO) build plugins/agents/hello --target-dir $(PLUGIN_OUT)
	$(NEXO) build plugins/agents/document-approval --target-dir $(PLUGIN_OUT)
	$(NEXO) build plugins/agents/release-gate --target-dir $(PLUGIN_OUT)
	$(NEXO) build plugins/skills/code-review --target-dir $(PLUGIN_OUT)
	$(NEXO) build plugins/search-backends/searxng --target-dir $(PLUGIN_OUT)
	$(NEXO) build plugins/search-backends/brave --target-dir $(PLUGIN_OUT)

demo: plugins
	@echo "== nexo inspect: an agent, a skill and a search backend"
	$(NEXO) inspect $(PLUGIN_OUT)/wasm32-wasip2/release/hello.wasm
	$(NEXO) inspect $(PLUGIN_OUT)/wasm32-wasip2/release/code_review.wasm
	$(NEXO) inspect $(PLUGIN_OUT)/wasm32-wasip2/release/searxng.wasm --config examples/web/searxng.toml
	@echo "== nexo run: the hello agent on a recorded conversation (scripted provider, offline)"
	$(NEXO) run $(PLUGIN_OUT)/wasm32-wasip2/release/hello.wasm "What is in this workspace?" \
	  --script examples/offline/hello-script.json --sandbox local --cwd examples/offline/workspace
	@echo "== nexo run: a declarative agent (examples/offline/reviewer.toml)"
	$(NEXO) run examples/offline/reviewer.toml "Review the workspace" \
	  --script examples/offline/reviewer-script.json --sandbox local --cwd examples/offline/workspace
	@echo "== nexo run: web access is guarded (the metadata address and an off-list host are refused)"
	$(NEXO) run examples/offline/researcher.toml "Read the instance metadata" \
	  --script examples/offline/researcher-script.json --allow fetch --mode auto
	@echo "== nexo run: the text-stats agent, which needs no model"
	$(NEXO) run $(PLUGIN_OUT)/wasm32-wasip2/release/text_stats.wasm "WebAssembly components give every agent its own sandbox."

# Installs the release host as $(CARGO_BIN)/nexo (cargo install reuses target/release).
install:
	$(CARGO) install --locked --path host
	@case ":$$PATH:" in *":$(CARGO_BIN):"*) echo "nexo is on your PATH: $$(command -v nexo)";; \
	  *) echo "add $(CARGO_BIN) to your PATH to run nexo:  export PATH=\"$(CARGO_BIN):\$$PATH\"";; esac

test: toolchain
	./scripts/test-deps.sh
	@# componentize-py and ComponentizeJS, for the Python and JavaScript example agents' tests.
	./scripts/python-deps.sh
	./scripts/js-deps.sh
	@# The npm reference MCP servers, for nexo-mcp's tests.
	./scripts/mcp-deps.sh
	@# The pinned Claude Code CLI, for the claude-code loop's live test.
	./scripts/claude-deps.sh
	@# Debian's chromium and playwright-core, for the web console's browser test (host/tests/console.rs).
	./scripts/console-deps.sh
	@# Debian's podman and its test image, for the container sandbox's real-engine tests (sandbox/tests/podman.rs).
	./scripts/podman-deps.sh
	@# PyPI's opentelemetry-proto, for the OTLP receiver the telemetry tests export to.
	./scripts/otel-deps.sh
	@# Debian's prometheus, which scrapes a real `nexo serve` in the metrics test (host/tests/metrics.rs).
	./scripts/prometheus-deps.sh
	@# wkg (crates.io), the other side of the registry tests (host/tests/registry.rs); they start
	@# their own registries on loopback (scripts/registry.sh).
	./scripts/wkg-deps.sh
	@# Against a PostgreSQL server of the tests' own (target/postgres), which the store suite runs
	@# against too; lists every skipped test, or part of one, at its end.
	CARGO=$(CARGO) ./scripts/test-workspace.sh
	@# The guarded client's test seam must never reach a normal build of nexo.
	@tree=$$($(CARGO) tree -p nexo -e normal,features -i nexo-egress) || { echo "error: cargo tree failed, so the seam check cannot run"; exit 1; }; \
	if echo "$$tree" | grep -q 'feature "testing"'; then \
		echo "error: a normal build of nexo enables nexo-egress/testing (the test-only network seam)"; exit 1; fi
	@# Formatting and lints are part of the tests (warnings are errors).
	$(MAKE) lint

bench: toolchain
	./scripts/python-deps.sh
	./scripts/js-deps.sh
	$(CARGO) bench -p nexo --bench engine
	$(CARGO) bench -p nexo-egress --bench client
	url=$$(./scripts/postgres.sh) && NEXO_TEST_POSTGRES=$$url $(CARGO) bench -p nexo-store --bench jobs

# nexo beside raw wasmtime 48 (the floor) and Extism 1.30 on the same guest
# work, in one run and one table with ratios (bench/peers/README.md).
bench-peers: toolchain
	./bench/peers/run.sh

# A whole `nexo run` process of a cached component against `nexo --version` (hyperfine).
bench-startup: toolchain
	./scripts/bench-startup.sh

# The regression guard: the core benches of the work tree against the previous
# commit, built and run side by side; fails if one is >10% slower (BENCH_LIMIT).
bench-check: toolchain
	./scripts/python-deps.sh
	./scripts/js-deps.sh
	./scripts/bench-check.sh

# A 100-turn conversation: nexo's per-turn cost early and late, beside the Python
# peer (openai-agents) on the same fake server; see docs/performance.md.
bench-conversation: toolchain
	./scripts/bench-conversation.sh

# `nexo serve` under load: 50 tenants and 500 concurrent runs, the same with a
# noisy tenant (spin and hog), and 10,000 runs waiting on the model (RSS);
# TENANTS, RUNS, DENSITY and MODEL_MS change the sizes (docs/serve.md).
bench-serve: toolchain
	$(CARGO) bench -p nexo --bench serve

# Every cargo-fuzz target for FUZZ_SECS seconds each (default 600); see CONTRIBUTING.md, "Fuzzing".
# `cargo test` runs the same targets briefly (fuzz-targets/tests/smoke.rs).
FUZZ_SECS ?= 600
chaos: toolchain
	./scripts/postgres.sh >/dev/null
	NEXO_CHAOS_SECS=$${NEXO_CHAOS_SECS:-300} $(CARGO) test -p nexo --test chaos -- --nocapture
	NEXO_CHAOS_SECS=$${NEXO_CHAOS_SECS:-60} ./scripts/chaos-mutants.sh

fuzz: toolchain
	FUZZ_SECS=$(FUZZ_SECS) ./scripts/fuzz.sh $(FUZZ_TARGETS)

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@# plugins/ (the SDK included), fuzz/ and examples/first-agent are workspaces of their own.
	CARGO=$(CARGO) ./scripts/lint-outside.sh

fmt:
	$(CARGO) fmt --all
