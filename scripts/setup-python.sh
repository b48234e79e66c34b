#!/usr/bin/env bash
# The Python packages the tests use as independent references, in a venv cached under
# ${INFERNO_CACHE:-~/.cache/inferno}/venv: `gguf` (llama.cpp's own GGUF reader and numpy
# dequantizers for every type), numpy, and the official `openai` client (tests/python/test_serve.py
# drives inferno serve through it, as users do), at pinned versions. Prints the venv's python.
set -euo pipefail

cache="${INFERNO_CACHE:-$HOME/.cache/inferno}"
venv="$cache/venv"
want="gguf==0.19.0 numpy==2.4.6 openai==3.57.0"
stamp="$venv/.inferno-packages"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$cache"
python3 -m venv "$venv" >&2
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
