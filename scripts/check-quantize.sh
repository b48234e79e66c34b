#!/usr/bin/env bash
# `inferno quantize` against llama.cpp's own llama-quantize: every file type, on a requantized
# real file (SmolLM2 Q4_1, rows of 576: the fallbacks), a random f16 model whose rows are
# multiples of 256 with an untied output (the K-quant mixes as written), and Gemma 3 270M Q4_K_M
# (rows of 640), compared byte for byte. Not part of `make test`: it needs the peer tools
# (`scripts/peer-llamacpp.sh tools`, tens of minutes to build once).
#   scripts/check-quantize.sh [TYPE...]     (default: all seventeen)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${INFERNO_CACHE:-$HOME/.cache/inferno}"
quantize="${LLAMA_QUANTIZE:-$cache/peers/tools/bin/llama-quantize}"
inferno="${INFERNO_BIN:-$repo/target/release/inferno}"
[ -x "$quantize" ] || { echo "no $quantize: run scripts/peer-llamacpp.sh tools first" >&2; exit 1; }
[ -x "$inferno" ] || { echo "no $inferno: run make build first" >&2; exit 1; }

types=("$@")
[ ${#types[@]} -gt 0 ] || types=(q4_0 q4_1 q5_0 q5_1 q8_0 f16 q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k iq4_nl iq4_xs)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

smollm2="$("$repo/scripts/fetch-model.sh")"
gemma="$("$repo/scripts/fetch-model.sh" gemma3-270m)"
"$inferno" synthetic "$work/f16-256.gguf" --shape head-dim-128 --type f16 --seed 7 --tokenizer-from "$smollm2" 2>/dev/null
inputs=("$smollm2" "$work/f16-256.gguf" "$gemma")

echo "llama-quantize: $quantize"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
failed=0
for input in "${inputs[@]}"; do
    for t in "${types[@]}"; do
        upper="$(echo "$t" | tr '[:lower:]' '[:upper:]')"
        "$quantize" --allow-requantize "$input" "$work/theirs.gguf" "$upper" 2 >"$work/log" 2>&1 ||
            { echo "llama-quantize failed on $(basename "$input") $upper:"; tail -5 "$work/log"; exit 1; }
        "$inferno" quantize "$input" "$work/ours.gguf" --type "$t" --allow-requantize 2>/dev/null
        if cmp -s "$work/theirs.gguf" "$work/ours.gguf"; then
            printf '%-40s %-7s identical (%s bytes)\n' "$(basename "$input")" "$t" "$(stat -c %s "$work/ours.gguf")"
        else
            printf '%-40s %-7s DIFFERENT: %s\n' "$(basename "$input")" "$t" "$(cmp "$work/theirs.gguf" "$work/ours.gguf" 2>&1 | head -1)"
            failed=$((failed + 1))
        fi
    done
done
[ "$failed" -eq 0 ] && echo "all identical" || { echo "$failed differ"; exit 1; }
