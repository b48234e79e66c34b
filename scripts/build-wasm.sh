#!/usr/bin/env bash
# Builds one browser variant of inferno-wasm into npm/pkg/<variant>/ (the npm package's builds) (wasm-bindgen --target web,
# then wasm-opt -O3 from npm binaryen when installed). Variants: reference (scalar), simd128,
# relaxed (simd128 + relaxed-simd), threads (relaxed + atomics and shared memory, for a
# cross-origin-isolated page: core's thread pool on Web Workers). Each has its own target dir,
# so RUSTFLAGS never invalidate another build's cache. Prints the time of each step. Run
# scripts/setup-wasm.sh first (make does): it installs the wasm-bindgen CLI and rust-src.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:?usage: build-wasm.sh reference|simd128|relaxed|threads}
case "$variant" in
    reference) features="" ;;
    simd128) features="+simd128" ;;
    relaxed) features="+simd128,+relaxed-simd" ;;
    threads) features="+simd128,+relaxed-simd,+atomics,+bulk-memory,+mutable-globals" ;;
    *) echo "unknown wasm variant '$variant' (reference, simd128, relaxed, threads)" >&2; exit 2 ;;
esac
flags=""
[ -n "$features" ] && flags="-C target-feature=$features"
extra=()
if [ "$variant" = threads ]; then
    # Shared memory needs a std compiled with atomics (-Z build-std: RUSTC_BOOTSTRAP lets the
    # pinned stable toolchain take it, with the rust-src component) and these link arguments:
    # the memory imported and shared (4 GiB at most), and the TLS symbols each worker needs.
    for arg in --shared-memory --import-memory --max-memory=4294967296 --export=__wasm_init_tls \
        --export=__tls_size --export=__tls_align --export=__tls_base --export=__heap_base; do
        flags="$flags -C link-arg=$arg"
    done
    export RUSTC_BOOTSTRAP=1
    extra=(-Z build-std=panic_abort,std --features threads)
fi
profile=${WASM_PROFILE:-wasm-release}
target_dir=target/wasm-$variant
out=npm/pkg/$variant
t0=$(date +%s)
RUSTFLAGS="$flags" cargo build --quiet -p inferno-wasm --target wasm32-unknown-unknown \
    --profile "$profile" --target-dir "$target_dir" "${extra[@]}"
t1=$(date +%s)
built="$target_dir/wasm32-unknown-unknown/$profile/inferno_wasm.wasm"
if [ "$out/inferno_wasm_bg.wasm" -nt "$built" ] && [ "$out/inferno_wasm.js" -nt "$built" ]; then
    echo "wasm $variant: cargo $((t1 - t0)) s, npm/pkg/$variant is up to date" >&2
    exit 0
fi
"${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen" --target web --no-typescript --out-dir "$out" "$built"
t2=$(date +%s)
opt="skipped (WASM_OPT=0 or no node_modules/.bin/wasm-opt)"
if [ -x node_modules/.bin/wasm-opt ] && [ "${WASM_OPT:-1}" != 0 ]; then
    enable="--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
        --enable-mutable-globals --enable-multivalue --enable-reference-types"
    case "$variant" in
        simd128) enable="$enable --enable-simd" ;;
        relaxed) enable="$enable --enable-simd --enable-relaxed-simd" ;;
        threads) enable="$enable --enable-simd --enable-relaxed-simd --enable-threads" ;;
    esac
    # shellcheck disable=SC2086
    node_modules/.bin/wasm-opt -O3 $enable "$out/inferno_wasm_bg.wasm" -o "$out/inferno_wasm_bg.wasm.opt"
    mv "$out/inferno_wasm_bg.wasm.opt" "$out/inferno_wasm_bg.wasm"
    touch "$out/inferno_wasm.js"
    opt="$(( $(date +%s) - t2 )) s"
fi
echo "wasm $variant: cargo $((t1 - t0)) s, wasm-bindgen $((t2 - t1)) s, wasm-opt $opt," \
    "$(stat -c %s "$out/inferno_wasm_bg.wasm") bytes" >&2
