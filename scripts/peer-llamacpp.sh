#!/usr/bin/env bash
# Builds the peer engine, llama.cpp as vendored by the PyPI package llama-cpp-python, from source
# into venvs under ~/.cache/inferno/peers/<build>/venv for scripts/peer_bench.py. Never part of
# `make test`: it takes tens of minutes on 2 cores and runs at the lowest priority.
# Usage: scripts/peer-llamacpp.sh [native|avx2|all]   (default: all; rerunning skips finished builds)
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
ROOT="${INFERNO_CACHE:-$HOME/.cache/inferno}/peers"
PYTHON="${PYTHON:-python3}"

# Pin the instruction sets instead of -march=native, so the two builds differ only in AVX-512.
# AMX is compiled out: llama.cpp's AMX matmul crashes on prompt batches on this machine.
# LLAVA (the multimodal library) and OpenSSL are not needed to time text generation.
COMMON="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
 -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
 -DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF"
cmake_args() {
    case "$1" in
    native) echo "$COMMON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON" ;;
    avx2) echo "$COMMON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF" ;;
    *)
        echo "unknown build '$1' (native, avx2)" >&2
        return 1
        ;;
    esac
}

fetch_sdist() {
    local dir="$ROOT/sdist"
    SDIST="$dir/llama_cpp_python-$VERSION.tar.gz"
    [ -f "$SDIST" ] && return 0
    mkdir -p "$dir"
    # Only llama-cpp-python itself as source; its build tools (cmake, ninja, scikit-build-core)
    # come as wheels, or pip would compile cmake from source too.
    "$PYTHON" -m pip download --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$VERSION" -d "$dir"
}

build() {
    local name="$1" args key dir
    args="$(cmake_args "$name" | tr -s ' \n' ' ')"
    dir="$ROOT/$name"
    # The sdist copy's path carries a hash of the flags: pip caches the built wheel by that path,
    # so a rerun reuses it and a change of flags can never pick up a stale wheel.
    key="$(printf '%s %s' "$VERSION" "$args" | sha256sum | cut -c1-12)"
    if [ -f "$dir/built-$key" ] && "$dir/venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
        echo "peer $name: already built ($dir/venv)"
        return 0
    fi
    echo "peer $name: building llama-cpp-python $VERSION with CMAKE_ARGS=$args (log: $dir/build.log)"
    rm -rf "$dir/venv"
    mkdir -p "$dir/src-$key"
    cp "$SDIST" "$dir/src-$key/"
    "$PYTHON" -m venv "$dir/venv"
    CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        nice -n 19 "$dir/venv/bin/pip" install -v "$dir/src-$key/$(basename "$SDIST")" \
        >"$dir/build.log" 2>&1 || {
        echo "peer $name: build failed; the end of $dir/build.log:" >&2
        tail -n 30 "$dir/build.log" >&2
        return 1
    }
    "$dir/venv/bin/python" -c "import llama_cpp; print('peer $name: llama_cpp', llama_cpp.__version__)"
    touch "$dir/built-$key"
}

which="${1:-all}"
fetch_sdist
case "$which" in
all)
    build avx2
    build native
    ;;
*) build "$which" ;;
esac
