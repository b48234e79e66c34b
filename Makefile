# inferno: the two commands of the README.
#   make run [PROMPT="..."]   fetch the default model (once), build, answer a prompt, streamed
#   make test                 everything the project promises, checked (what CI runs)

PROMPT ?= Explain in two sentences why the sky is blue.
CARGO  ?= cargo
MODEL  := $(shell echo $${INFERNO_CACHE:-$$HOME/.cache/inferno})/models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: run test setup model build test-rust test-wasm-build clean

run: model build
	./target/release/inferno run --model "$(MODEL)" "$(PROMPT)"

# The toolchain (rust-toolchain.toml pins it) and its wasm target; nothing else is installed by hand.
setup:
	@rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

model:
	@./scripts/fetch-model.sh >/dev/null

build:
	$(CARGO) build --release -p inferno-native

test: setup model build test-rust test-wasm-build

# Unit and integration tests of every crate, optimized (the model tests run a real forward).
# The CLI tests run the binary built above.
test-rust:
	INFERNO_BIN=$(CURDIR)/target/release/inferno $(CARGO) test --release --workspace --exclude inferno-wasm

# core must build for the browser: no threads, no file system, no x86 assumptions.
test-wasm-build: setup
	$(CARGO) build --release -p inferno-core --target wasm32-unknown-unknown

clean:
	$(CARGO) clean
