#!/usr/bin/env bash
# Installs what the browser build and its tests need, once (idempotent; make calls it):
# the wasm32 target and rust-src, the wasm-bindgen CLI at the crate's exact version, the npm tools
# (binaryen's wasm-opt, playwright-core, puppeteer-core, typescript, wllama for the bench) and,
# with --browser, Chromium and Firefox ESR (the npm package's tests run in both).
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' Cargo.toml)
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown \
    || rustup target add wasm32-unknown-unknown
# The threads build rebuilds std with atomics from its source.
rustup component list --installed 2>/dev/null | grep -q '^rust-src' || rustup component add rust-src
wasm_bindgen="${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen"
if ! "$wasm_bindgen" --version 2>/dev/null | grep -qx "wasm-bindgen $want"; then
    echo "installing wasm-bindgen-cli $want (about 15 minutes, once) ..." >&2
    # No --locked: a pinned dependency version of its lock file is missing from the mirror.
    cargo install wasm-bindgen-cli --version "$want" >&2
fi
# Node.js runs the wasm tests and drives the browsers: Debian's package where it is missing.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "installing Node.js (Debian's nodejs and npm) ..." >&2
    if [ "$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi
    $sudo apt-get update -qq >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
fi
if [ ! -x node_modules/.bin/wasm-opt ] || [ ! -d node_modules/playwright-core ] \
    || [ ! -d node_modules/@wllama/wllama ] || [ ! -d node_modules/puppeteer-core ] \
    || [ ! -x node_modules/.bin/tsc ]; then
    npm ci --no-audit --no-fund >&2
fi
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/firefox-esr ] || missing+=(firefox-esr)
if [ "${1:-}" = "--browser" ] && [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi
    $sudo apt-get update -qq >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
