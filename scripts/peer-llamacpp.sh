#!/usr/bin/env bash
# Builds the peer engine, llama.cpp as vendored by the PyPI package llama-cpp-python, from source.
# Never part of `make test`: it takes tens of minutes on 2 cores and runs at the lowest priority.
#   scripts/peer-llamacpp.sh [native|avx2|all]  Python venvs under ~/.cache/inferno/peers/<build>/venv
#                                               for scripts/peer_bench.py (default: all)
#   scripts/peer-llamacpp.sh tools              llama.cpp's own programs (llama-quantize,
#                                               llama-perplexity, llama-bench, llama-server,
#                                               llama-cli, llama-tokenize) from the same sdist's
#                                               vendor/llama.cpp, built with cmake into
#                                               ~/.cache/inferno/peers/tools/bin
# Rerunning skips finished builds. Each build prints the instruction sets it was given.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
ROOT="${INFERNO_CACHE:-$HOME/.cache/inferno}/peers"
PYTHON="${PYTHON:-python3}"

# The instruction sets come from the host's CPU flags, never assumed: a build given AVX-VNNI dies
# with SIGILL on a CPU without it (AMD Zen 4 has AVX-512 VNNI but no AVX-VNNI; Zen 3 has no
# AVX-512 at all). "avx2" is the 256-bit build (AVX-VNNI where the host has it); "native" adds
# the host's AVX-512 sets. AMX is always compiled out: llama.cpp's AMX matmul crashes on prompt
# batches on these machines. LLAVA and OpenSSL are not needed to time text generation.
has() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }
onoff() { if has "$1"; then echo ON; else echo OFF; fi; }
cmake_args() {
    local common avx512
    common="-DGGML_NATIVE=OFF -DGGML_AVX=$(onoff avx) -DGGML_AVX2=$(onoff avx2) -DGGML_FMA=$(onoff fma)
 -DGGML_F16C=$(onoff f16c) -DGGML_BMI2=$(onoff bmi2) -DGGML_AVX_VNNI=$(onoff avx_vnni)
 -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF"
    avx512="-DGGML_AVX512=$(onoff avx512f) -DGGML_AVX512_VNNI=$(onoff avx512_vnni)
 -DGGML_AVX512_BF16=$(onoff avx512_bf16) -DGGML_AVX512_VBMI=$(onoff avx512vbmi)"
    case "$1" in
    native | tools) echo "$common $avx512" ;;
    avx2) echo "$common -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF" ;;
    *)
        echo "unknown build '$1' (native, avx2, tools)" >&2
        return 1
        ;;
    esac
}

# The sets a build got, for the output and the bench tables: "AVX2 FMA F16C BMI2 AVX512 ...".
describe() { grep -o 'GGML_[A-Z0-9_]*=ON' <<<"$1" | sed 's/GGML_//; s/=ON//' | grep -v NATIVE | tr '\n' ' '; }

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
        echo "peer $name: already built ($dir/venv; $(describe "$args"))"
        return 0
    fi
    echo "peer $name: building llama-cpp-python $VERSION for $(describe "$args")(log: $dir/build.log)"
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
    echo "$(describe "$args")" >"$dir/isa"
    touch "$dir/built-$key"
}

# llama.cpp's programs, the independent references of the quantizer (llama-quantize), perplexity
# (llama-perplexity), tokenization and greedy text (llama-tokenize, llama-cli) and the server
# (llama-server), and the speed peer (llama-bench). cmake and ninja come as PyPI wheels.
TOOLS="llama-quantize llama-perplexity llama-bench llama-server llama-cli llama-tokenize llama-simple"
build_tools() {
    local args key dir src
    args="$(cmake_args tools | tr -s ' \n' ' ')"
    dir="$ROOT/tools"
    key="$(printf '%s %s %s' "$VERSION" "$args" "$TOOLS" | sha256sum | cut -c1-12)"
    if [ -f "$dir/built-$key" ]; then
        echo "peer tools: already built ($dir/bin; $(describe "$args"))"
        return 0
    fi
    echo "peer tools: building $TOOLS for $(describe "$args")(log: $dir/build.log)"
    mkdir -p "$dir"
    if [ ! -x "$dir/venv/bin/cmake" ]; then
        "$PYTHON" -m venv "$dir/venv"
        "$dir/venv/bin/pip" install -q cmake ninja >"$dir/build.log" 2>&1
    fi
    src="$dir/src-$key"
    if [ ! -d "$src/vendor/llama.cpp" ]; then
        rm -rf "$src" && mkdir -p "$src"
        tar -xzf "$SDIST" -C "$src" --strip-components=1
    fi
    # shellcheck disable=SC2086 # the flags are words
    (
        cd "$src/vendor/llama.cpp"
        PATH="$dir/venv/bin:$PATH" nice -n 19 cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
            $args
        # shellcheck disable=SC2086
        PATH="$dir/venv/bin:$PATH" nice -n 19 cmake --build build -j "$(nproc)" --target $TOOLS
    ) >>"$dir/build.log" 2>&1 || {
        echo "peer tools: build failed; the end of $dir/build.log:" >&2
        tail -n 30 "$dir/build.log" >&2
        return 1
    }
    mkdir -p "$dir/bin"
    for t in $TOOLS; do cp "$src/vendor/llama.cpp/build/bin/$t" "$dir/bin/"; done
    echo "$(describe "$args")" >"$dir/isa"
    touch "$dir/built-$key"
    echo "peer tools: $dir/bin ($(describe "$args"))"
}

which="${1:-all}"
fetch_sdist
case "$which" in
all)
    build avx2
    build native
    ;;
tools) build_tools ;;
*) build "$which" ;;
esac
