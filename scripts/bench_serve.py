#!/usr/bin/env python3
"""`inferno serve` against llama.cpp's llama-server on the same GGUF and threads, one server at a
time: aggregate generated tokens/s with 1, 4 and 8 concurrent streams (from the usage each reply
reports), and time to first token p50/p95 of a 4-turn chat with prefix reuse (the default), without
(`cache_prompt: false`), and (inferno) with compose: the final message POSTed to /v1/compose
before it is sent, as the page does while the user types. Medians of --repeats runs; prints a
markdown table with ratios (inferno / llama-server; for TTFT, llama-server / inferno, so > 1 is
inferno ahead either way). Plain python3, standard library only. Not a test.
    python3 scripts/bench_serve.py [--threads 2] [--repeats 3] [--json out.json] [--quick]
"""

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("INFERNO_CACHE", Path.home() / ".cache/inferno"))
DEFAULT_MODEL = CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LLAMA = CACHE / "peers/tools/bin/llama-server"

# Prompts that ask for long replies, one per stream.
LONG_PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Explain in detail how a steam engine works, step by step.",
    "Describe a journey across a desert, day by day, for a whole week.",
    "Write a detailed guide to growing tomatoes in a small garden.",
    "Tell the history of the bicycle from its invention to today.",
    "Write a long letter from a sailor to his family, describing life at sea.",
    "Explain how the internet works to a curious twelve-year-old, in depth.",
    "Describe every room of an old castle, one after another.",
]

# A long system prompt makes prefix reuse matter: every turn of the chat starts with it.
SYSTEM = " ".join(
    [
        "You are a helpful assistant for a small bookshop. The shop sells new and used books,",
        "maps, postcards and notebooks, opens from nine to six except on Sundays, and runs a",
        "reading club on the first Thursday of each month.",
    ]
    * 12
)
TURNS = [
    "Hello! What do you sell?",
    "When are you open?",
    "Tell me about the reading club.",
    "Can you recommend a book for a long train journey?",
]


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process; `kind` is "inferno" or "llama-server"."""

    def __init__(self, kind, binary, model, threads, parallel, quiet_log):
        self.kind = kind
        self.log = quiet_log
        if kind == "inferno":
            args = [
                binary,
                "serve",
                "--model",
                model,
                "--threads",
                str(threads),
                "--port",
                "0",
                "--parallel",
                str(parallel),
            ]
            self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
            line = self.process.stdout.readline()
            if "listening on http://" not in line:
                self.stop()
                sys.exit(f"{' '.join(args)} printed {line!r}; see {self.log.name}")
            self.port = int(line.rsplit(":", 1)[1])
        else:
            self.port = free_port()
            args = [
                binary,
                "-m",
                model,
                "-t",
                str(threads),
                "-np",
                str(parallel),
                "-c",
                str(parallel * 2048),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ]
            self.process = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        self.wait_healthy(args)

    def wait_healthy(self, args):
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(
                    f"{' '.join(map(str, args))} exited ({self.process.returncode}); see {self.log.name}"
                )
            try:
                status, _ = self.get("/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"{self.kind} did not become healthy in 180 s; see {self.log.name}")

    def get(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status != 200:
                raise RuntimeError(f"{self.kind} {path}: {r.status} {data[:300]!r}")
            return json.loads(data)
        finally:
            conn.close()

    def stream_chat(self, body):
        """Streams one chat request: (seconds to the first text, text, completion tokens)."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        if self.kind == "llama-server":
            body["ignore_eos"] = True  # inferno has no such switch: both count usage, not max_tokens
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        first = None
        text, pieces, usage = "", 0, None
        try:
            conn.request(
                "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
            )
            r = conn.getresponse()
            if r.status != 200:
                raise RuntimeError(f"{self.kind}: {r.status} {r.read()[:300]!r}")
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"{self.kind}: {chunk['error']}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        if first is None:
                            first = time.perf_counter() - t0
                        text += piece
                        pieces += 1
        finally:
            conn.close()
        tokens = usage["completion_tokens"] if usage else pieces
        return first if first is not None else time.perf_counter() - t0, text, tokens

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def throughput(server, streams, max_tokens):
    """Aggregate generated tokens/s of `streams` concurrent streams."""
    results = [None] * streams
    barrier = threading.Barrier(streams + 1)

    def run(i):
        barrier.wait()
        body = {
            "messages": [{"role": "user", "content": LONG_PROMPTS[i % len(LONG_PROMPTS)]}],
            "max_tokens": max_tokens,
            "temperature": 0.7,
            "seed": 1000 + i,
        }
        results[i] = server.stream_chat(body)[2]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    return sum(results) / seconds, sum(results)


def percentile(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def multi_turn_ttft(server, turns, max_tokens, mode, run):
    """Seconds to the first token of each turn of one chat. mode: "reuse", "no-reuse" or
    "compose". Each run's chat differs (the run number is in the first message), so no run
    reuses another's."""
    messages = [{"role": "system", "content": SYSTEM}]
    ttfts = []
    for k, turn in enumerate(turns):
        content = f"(chat {run}) {turn}" if k == 0 else turn
        if mode == "compose":
            server.post("/v1/compose", {"messages": messages, "draft": content})
        messages.append({"role": "user", "content": content})
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        if mode == "no-reuse":
            body["cache_prompt"] = False
        ttft, text, _ = server.stream_chat(body)
        ttfts.append(ttft)
        messages.append({"role": "assistant", "content": text})
    return ttfts


def bench(kind, binary, args, log):
    parallel = max(args.streams)
    server = Server(kind, binary, str(args.model), args.threads, parallel, log)
    out = {}
    try:
        # One short request first so page-ins and first-use allocations are not timed.
        server.stream_chat(
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
        )
        for n in args.streams:
            runs = [throughput(server, n, args.max_tokens) for _ in range(args.repeats)]
            out[f"tok_s_{n}"] = statistics.median(r[0] for r in runs)
            out[f"tokens_{n}"] = statistics.median(r[1] for r in runs)
            print(f"{kind}: {n} streams: {out[f'tok_s_{n}']:.1f} tok/s", file=sys.stderr)
        modes = ["reuse", "no-reuse"] + (["compose"] if kind == "inferno" else [])
        for mode in modes:
            p50s, p95s = [], []
            for run in range(args.repeats):
                ttfts = multi_turn_ttft(server, TURNS[: args.turns], args.turn_tokens, mode, f"{mode}-{run}")
                p50s.append(percentile(ttfts, 50))
                p95s.append(percentile(ttfts, 95))
            out[f"ttft_p50_{mode}"] = statistics.median(p50s)
            out[f"ttft_p95_{mode}"] = statistics.median(p95s)
            print(f"{kind}: TTFT {mode}: p50 {out[f'ttft_p50_{mode}'] * 1000:.0f} ms", file=sys.stderr)
    finally:
        server.stop()
    return out


def table(results, args):
    inferno, llama = results.get("inferno", {}), results.get("llama-server", {})

    def cell(value, ms=False):
        if value is None:
            return "n/a"
        return f"{value * 1000:.0f} ms" if ms else f"{value:.1f}"

    def ratio(a, b):
        return f"{a / b:.2f}x" if a is not None and b else "n/a"

    rows = [
        f"CPU: {cpu_model()}, {args.threads} threads; model: {Path(args.model).name}; "
        f"median of {args.repeats} runs; {args.max_tokens} tokens per stream.",
        "",
        "| | inferno serve | llama-server | ratio |",
        "|---|---|---|---|",
    ]
    for n in args.streams:
        a, b = inferno.get(f"tok_s_{n}"), llama.get(f"tok_s_{n}")
        rows.append(
            f"| aggregate tok/s, {n} stream{'s' if n > 1 else ''} | {cell(a)} | {cell(b)} | {ratio(a, b)} |"
        )
    n0, n1 = args.streams[0], args.streams[-1]
    if n1 != n0:

        def scaling(r):
            return r[f"tok_s_{n1}"] / r[f"tok_s_{n0}"] if f"tok_s_{n1}" in r else None

        a, b = scaling(inferno), scaling(llama)
        rows.append(
            f"| {n1} streams / {n0} | {ratio(a, 1) if a else 'n/a'} | {ratio(b, 1) if b else 'n/a'} | |"
        )
    names = {"reuse": "prefix reuse", "no-reuse": "no reuse (cache_prompt false)", "compose": "with compose"}
    for mode, name in names.items():
        for p in ("p50", "p95"):
            a, b = inferno.get(f"ttft_{p}_{mode}"), llama.get(f"ttft_{p}_{mode}")
            label = f"TTFT {p}, {args.turns}-turn chat, {name}"
            rows.append(f"| {label} | {cell(a, True)} | {cell(b, True)} | {ratio(b, a)} |")
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, default=Path(os.environ.get("INFERNO_MODEL", DEFAULT_MODEL)))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--streams", default="1,4,8", help="concurrent stream counts (default 1,4,8)")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per stream in the throughput runs")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--turn-tokens", type=int, default=48, help="max_tokens of each chat turn")
    p.add_argument("--inferno", default=os.environ.get("INFERNO_BIN", str(REPO / "target/release/inferno")))
    p.add_argument("--llama-server", default=str(DEFAULT_LLAMA))
    p.add_argument("--only", choices=["inferno", "llama-server"], help="run one server only")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument(
        "--quick", action="store_true", help="tiny settings: a check that it runs, not a measurement"
    )
    args = p.parse_args()
    if args.quick:
        args.streams, args.max_tokens, args.repeats, args.turns, args.turn_tokens = "1,2", 16, 1, 2, 8
    args.streams = [int(s) for s in str(args.streams).split(",")]
    if not args.model.is_file():
        sys.exit(f"no model at {args.model} (scripts/fetch-model.sh fetches it)")

    servers = [("inferno", args.inferno), ("llama-server", args.llama_server)]
    results = {}
    with tempfile.NamedTemporaryFile(prefix="bench-serve-", suffix=".log", delete=False) as log:
        for kind, binary in servers:
            if args.only and kind != args.only:
                continue
            if not Path(binary).is_file():
                print(f"skipping {kind}: {binary} is missing", file=sys.stderr)
                continue
            results[kind] = bench(kind, binary, args, log)
    print(table(results, args))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cpu": cpu_model(),
                    "threads": args.threads,
                    "model": str(args.model),
                    "repeats": args.repeats,
                    "results": results,
                },
                indent=2,
            )
        )
    os.unlink(log.name)


if __name__ == "__main__":
    main()
