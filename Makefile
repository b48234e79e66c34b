# inferno: the two commands of the README.
#   make run [PROMPT="..."]   fetch the default model (once), build, answer a prompt, streamed
#   make test                 everything the project promises, checked (what CI runs)
#   make serve                build the wasm and serve the chat page + model on 127.0.0.1:8080
#                             (cross-origin isolated, so the page runs the threads build)
#   make npm                  the npm package (npm/, with the four wasm builds) packed into
#                             target/npm/inferno-llm-<version>.tgz

PROMPT ?= Explain in two sentences why the sky is blue.
CARGO  ?= cargo
MODEL  := $(shell echo $${INFERNO_CACHE:-$$HOME/.cache/inferno})/models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: npm test-crates run test setup setup-python model model-gemma build test-rust test-wasm-build clean setup-wasm wasm serve test-wasm bench-wasm wasm-selftest bench-wasm-kernels

run: model build
	./target/release/inferno run --model "$(MODEL)" "$(PROMPT)"

# The toolchain (rust-toolchain.toml pins it) and its wasm target; nothing else is installed by hand.
setup:
	@rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

model:
	@./scripts/fetch-model.sh >/dev/null

# Gemma 3 270M Q4_K_M (made by llama.cpp): real K-quant blocks for the tests. Cached, never
# committed (Gemma's terms).
model-gemma:
	@./scripts/fetch-model.sh gemma3-270m >/dev/null

build:
	$(CARGO) build --release -p inferno-native

# The wasm builds of `make test` skip fat LTO and wasm-opt (only speed and size, not results,
# depend on them; `make wasm` / `make serve` build the release ones).
test: WASM_PROFILE = wasm-test
test: export WASM_OPT = 0
# setup-wasm first: the Rust tests run the wasm kernel self test under Node.
test: setup-wasm setup-python model model-gemma build wasm-selftest test-rust test-crates test-wasm

# Unit and integration tests of every crate, optimized (the model tests run a real forward).
# The CLI tests run the binary built above.
# The venv of the independent Python references (gguf, numpy), cached; test-rust reads its path.
setup-python:
	@./scripts/setup-python.sh >/dev/null

test-rust:
	INFERNO_PYTHON=$$(./scripts/setup-python.sh) INFERNO_WASM_PROFILE=$(WASM_PROFILE) INFERNO_BIN=$(CURDIR)/target/release/inferno $(CARGO) test --release --workspace --exclude inferno-wasm

# The published crates: `cargo package` (metadata, files; --no-verify: the verify build would
# need inferno-core on crates.io) and their docs. RUSTDOCFLAGS=-D warnings once
# core/src/quant/kquants.rs's doc comments escape their [j] / [l] indexing.
test-crates:
	$(CARGO) package -p inferno-core -p inferno-native --no-verify --allow-dirty --quiet
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p inferno-core -p inferno-native --quiet

# core must build for the browser: no threads, no file system, no x86 assumptions.
test-wasm-build: setup
	$(CARGO) build --release -p inferno-core --target wasm32-unknown-unknown

# The browser: wasm-bindgen CLI, npm tools (package-lock.json), Chromium for the browser tests.
setup-wasm: setup
	./scripts/setup-wasm.sh --browser

# The cargo profile of the wasm builds (make test uses wasm-test).
WASM_PROFILE ?= wasm-release
export WASM_PROFILE

# Four builds into npm/pkg/<variant>/ (the npm package's; the page serves npm/ at /inferno/): scalar reference, simd128, simd128 + relaxed-simd, and
# relaxed with threads (shared memory; the page takes it when cross-origin isolated).
WASM_VARIANTS ?= reference simd128 relaxed threads
wasm: setup-wasm
	@for v in $(WASM_VARIANTS); do ./scripts/build-wasm.sh $$v || exit 1; done

npm: wasm
	@mkdir -p target/npm
	node scripts/npm-api.mjs
	cd npm && npm pack --pack-destination ../target/npm

serve: wasm model
	node scripts/serve.mjs --port $${PORT:-8080} --model "$(MODEL)"

# Every wasm build's logits == native reference bitwise (Node), the chat page in Chromium (in
# the tab, and against `inferno serve`), and the npm package packed and installed (types, Node,
# Chromium, Firefox).
test-wasm: wasm model build
	WASM_VARIANTS="$(WASM_VARIANTS)" INFERNO_WASM_TESTS=1 INFERNO_BIN=$(CURDIR)/target/release/inferno $(CARGO) test --release -p inferno-tests --test wasm_browser --test serve -- --test-threads=1 --nocapture

# Browser vs native vs wllama tokens/s (not part of make test).
bench-wasm: wasm model build
	node tests/wasm/bench.mjs --model "$(MODEL)"

# The wasm kernels' bitwise self test, built three ways (reference, simd128, + relaxed-simd),
# in the target dirs of scripts/build-wasm.sh (one per RUSTFLAGS: no cache thrash). Run by
# tests/tests/wasm_kernels.rs under Node (part of test-rust).
WASM_SELFTEST = $(CARGO) build --profile $(WASM_PROFILE) -p inferno-wasm-selftest --target wasm32-unknown-unknown
wasm-selftest: setup
	RUSTFLAGS="" $(WASM_SELFTEST) --target-dir target/wasm-reference
	RUSTFLAGS="-C target-feature=+simd128" $(WASM_SELFTEST) --target-dir target/wasm-simd128
	RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" $(WASM_SELFTEST) --target-dir target/wasm-relaxed

# Quantized matmul and decode attention speed per wasm backend, in Node and in headless Chromium
# (not part of make test).
bench-wasm-kernels: wasm-selftest setup-wasm
	node tests/wasm-selftest/run.mjs target/wasm-simd128/wasm32-unknown-unknown/$(WASM_PROFILE)/inferno_wasm_selftest.wasm --bench --chromium
	node --experimental-wasm-relaxed-simd --no-liftoff tests/wasm-selftest/run.mjs target/wasm-relaxed/wasm32-unknown-unknown/$(WASM_PROFILE)/inferno_wasm_selftest.wasm --bench --chromium

clean:
	$(CARGO) clean
