#!/usr/bin/env python3
"""Times llama.cpp (the builds made by scripts/peer-llamacpp.sh) and `inferno bench --json` in the
same run, on the same GGUF, threads and prompt lengths, and prints our/their ratios for prefill
and decode. Plain python3 runs this; each peer is timed by re-running this file with the --peer
flag under that build's venv, which prints one JSON object per line like `inferno bench --json`.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("INFERNO_CACHE", Path.home() / ".cache/inferno"))
DEFAULT_MODEL = CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"

WORDS = (
    "the old miller repaired a crooked bridge before the storm and our neighbour painted "
    "silver letters beside the canal while a curious child counted golden lanterns near the "
    "northern pass during the long winter when the lighthouse keeper measured the distant "
    "river under a grey sky at the edge of town"
).split()


def parse_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def prose(seed, words):
    """Random sentences from a small vocabulary: plain English-like text, different per seed."""
    rng = random.Random(seed)
    out = []
    while len(out) < words:
        sentence = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        out.extend(sentence[:-1] + [sentence[-1] + "."])
    return " ".join(out)


def peer_main(args):
    """Runs inside a peer venv: times llama.cpp's prompt eval and greedy decode."""
    import ctypes

    import llama_cpp
    import numpy as np

    model_name = Path(args.model).name
    n_ctx = max(args.prompt_lengths) + args.decode_tokens + 16
    for threads in args.threads:
        llm = llama_cpp.Llama(
            model_path=str(args.model),
            n_threads=threads,
            n_threads_batch=threads,
            n_ctx=n_ctx,
            n_batch=max(512, max(args.prompt_lengths)),
            n_ubatch=512,
            verbose=False,
        )
        n_vocab = llm.n_vocab()
        ctx = llm.ctx

        def last_logits():
            ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
            return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))

        for length in args.prompt_lengths:
            prefill, decode = [], []
            for trial in range(args.trials + 1):
                # Every trial has its own text, so no prompt shares a prefix with another.
                text = prose(length * 1000 + trial, length * 2)
                prompt = llm.tokenize(text.encode(), add_bos=False)[:length]
                if len(prompt) < length:
                    sys.exit(f"peer: generated text gave {len(prompt)} < {length} tokens")
                llm.reset()
                llama_cpp.llama_perf_context_reset(ctx)
                t0 = time.perf_counter()
                llm.eval(prompt)
                logits = last_logits()  # also waits for the computation to finish
                t1 = time.perf_counter()
                for _ in range(args.decode_tokens):
                    llm.eval([int(np.argmax(logits))])
                    logits = last_logits()
                t2 = time.perf_counter()
                perf = llama_cpp.llama_perf_context(ctx)
                # llama.cpp's own counters when it keeps them; else our wall clock.
                pre_ms = perf.t_p_eval_ms if perf.t_p_eval_ms > 0 else (t1 - t0) * 1e3
                dec_ms = perf.t_eval_ms if perf.t_eval_ms > 0 else (t2 - t1) * 1e3
                if trial > 0:  # trial 0 is the warm-up
                    prefill.append(pre_ms)
                    decode.append(dec_ms)
            pre_ms, dec_ms = statistics.median(prefill), statistics.median(decode)
            row = {
                "model": model_name,
                "threads": threads,
                "kernels": f"llama.cpp-{args.build}",
                "prompt_tokens": length,
                "prefill_ms": pre_ms,
                "prefill_tok_s": length / (pre_ms / 1e3),
                "decode_tokens": args.decode_tokens,
                "decode_tok_s": args.decode_tokens / (dec_ms / 1e3) if dec_ms > 0 else 0.0,
            }
            print(json.dumps(row), flush=True)
        del llm


def run_lines(cmd, what):
    print(f"running {what}: {' '.join(map(str, cmd))}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(f"{what} failed (exit {proc.returncode}); leaving it out:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return []
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in rows:  # progress, since a full run takes many minutes
        print(f"  {r['kernels']} threads {r['threads']} prompt {r['prompt_tokens']}: prefill "
              f"{r['prefill_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.1f} tok/s", file=sys.stderr)
    return rows


def llama_bench_row(args, binary, threads, length):
    """llama.cpp's own llama-bench (the `tools` build: the host's instruction sets, AMX off) on
    the same (threads, prompt length): prefill `-p length`, decode `-n decode_tokens` at depth
    `length`; the median of its repetitions (it warms up first)."""
    def run(extra):
        cmd = [binary, "-m", args.model, "-t", str(threads), "-r", str(args.trials), "-o", "jsonl"] + extra
        print(f"running llama-bench: {' '.join(map(str, cmd))}", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            print(f"llama-bench failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
            return None
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return statistics.median(rows[-1]["samples_ts"]) if rows else None
    prefill = run(["-p", str(length), "-n", "0"])
    decode = run(["-p", "0", "-n", str(args.decode_tokens), "-d", str(length)])
    if prefill is None or decode is None:
        return []
    row = {
        "model": Path(args.model).name,
        "threads": threads,
        "kernels": "llama.cpp-bench",
        "prompt_tokens": length,
        "prefill_ms": length / prefill * 1e3,
        "prefill_tok_s": prefill,
        "decode_tokens": args.decode_tokens,
        "decode_tok_s": decode,
    }
    print(f"  llama.cpp-bench threads {threads} prompt {length}: prefill {prefill:.1f} tok/s, "
          f"decode {decode:.1f} tok/s", file=sys.stderr)
    return [row]


def flags(args, threads, length):
    return [
        "--threads", str(threads),
        "--prompt-lengths", str(length),
        "--trials", str(args.trials),
        "--decode-tokens", str(args.decode_tokens),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=parse_list, default=[1, 2])
    parser.add_argument("--prompt-lengths", type=parse_list, default=[50, 500, 1500])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1,
                        help="turns each engine takes per (threads, prompt length); a ratio cell is "
                             "then the median of the rounds' ratios, with their range")
    parser.add_argument("--builds", default="avx2,native,llama-bench",
                        help="peers to time (those built): the llama-cpp-python builds avx2 and native, "
                             "and llama-bench from scripts/peer-llamacpp.sh tools")
    parser.add_argument("--inferno", type=Path, default=REPO / "target/release/inferno")
    parser.add_argument("--no-inferno", action="store_true", help="time the peers only")
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    parser.add_argument("--peer", help=argparse.SUPPRESS)  # internal: run inside a peer venv
    args = parser.parse_args()
    if args.trials < 1 or args.decode_tokens < 1 or args.rounds < 1:
        parser.error("--trials, --decode-tokens and --rounds must be at least 1")
    if not args.model.is_file():
        parser.error(f"model {args.model} not found (scripts/fetch-model.sh fetches the default)")
    if args.peer:
        args.build = args.peer
        return peer_main(args)

    if not args.no_inferno and not args.inferno.is_file():
        parser.error(f"{args.inferno} not found: cargo build --release -p inferno-native")
    peers = []
    llama_bench = None
    for build in [b for b in args.builds.split(",") if b]:
        if build == "llama-bench":
            binary = CACHE / "peers/tools/bin/llama-bench"
            if binary.is_file():
                llama_bench = binary
            else:
                print(f"llama-bench not built ({binary}): run scripts/peer-llamacpp.sh tools", file=sys.stderr)
            continue
        python = CACHE / "peers" / build / "venv/bin/python"
        if python.is_file():
            peers.append((build, python))
        else:
            print(f"peer {build} not built ({python}): run scripts/peer-llamacpp.sh {build}", file=sys.stderr)
    rows = []
    # The engines take turns on every (threads, prompt length), round after round, so a change in
    # the machine's load during the run skews both sides of a round's ratio alike.
    for threads in args.threads:
        for length in args.prompt_lengths:
            for round_ in range(args.rounds):
                turn = []
                if not args.no_inferno:
                    cmd = [args.inferno, "bench", "--model", args.model, "--json"]
                    turn += run_lines(cmd + flags(args, threads, length), "inferno")
                for build, python in peers:
                    cmd = [python, __file__, "--peer", build, "--model", args.model]
                    turn += run_lines(cmd + flags(args, threads, length), f"llama.cpp {build}")
                if llama_bench:
                    turn += llama_bench_row(args, llama_bench, threads, length)
                rows += [dict(r, round=round_) for r in turn]
    if args.json:
        for row in rows:
            print(json.dumps(row))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rounds = f"; {args.rounds} rounds (tok/s: medians; ratios: median of the rounds' [range])" \
        if args.rounds > 1 else ""
    print(f"CPU: {cpu}; model {Path(args.model).name}; median of {args.trials} trials{rounds}")
    print_table(rows)


def print_table(rows):
    """One line per (threads, prompt length): each engine's median tok/s over the rounds, and per
    peer the median of the rounds' ours/theirs ratios, with their range when there are several."""
    ours = lambda r: not r["kernels"].startswith("llama.cpp")
    peers = sorted({r["kernels"] for r in rows if not ours(r)})
    header = ["threads", "prompt", "inferno kernels", "inferno prefill tok/s", "inferno decode tok/s"]
    for p in peers:
        header += [f"{p} prefill", "prefill ours/theirs", f"{p} decode", "decode ours/theirs"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key in sorted({(r["threads"], r["prompt_tokens"]) for r in rows}):
        cell = [r for r in rows if (r["threads"], r["prompt_tokens"]) == key]
        us = {r.get("round", 0): r for r in cell if ours(r)}
        median = lambda rs, field: statistics.median(r[field] for r in rs)
        line = [str(key[0]), str(key[1])]
        if us:
            kernels = sorted({r["kernels"] for r in us.values()})
            line += ["/".join(kernels), f"{median(us.values(), 'prefill_tok_s'):.1f}",
                     f"{median(us.values(), 'decode_tok_s'):.1f}"]
        else:
            line += ["-"] * 3
        for p in peers:
            them = {r.get("round", 0): r for r in cell if r["kernels"] == p}
            if not them:
                line += ["-"] * 4
                continue

            def ratio(field):
                # Each round's ratio pairs the two engines' runs of that round.
                rs = sorted(us[k][field] / them[k][field] for k in them if k in us and them[k][field] > 0)
                if not rs:
                    return "-"
                text = f"{statistics.median(rs):.2f}"
                return text + (f" [{rs[0]:.2f}-{rs[-1]:.2f}]" if len(rs) > 1 else "")

            line += [f"{median(them.values(), 'prefill_tok_s'):.1f}", ratio("prefill_tok_s"),
                     f"{median(them.values(), 'decode_tok_s'):.1f}", ratio("decode_tok_s")]
        print("| " + " | ".join(line) + " |")


if __name__ == "__main__":
    main()
