#!/usr/bin/env python3
"""`inferno serve` end to end, as its users meet it (the contract: issue 14): the official `openai`
client (chat, completions, streamed and not, seeds, logprobs, errors as the client's exception
types); 8 concurrent streams equal bitwise to the same requests run alone (text and logprobs,
floats compared with ==); prefix reuse and compose giving the uncached reply; a client that
vanishes (running or queued) freeing its slot; a burst of 50 under a small KV budget; request
timeouts; SIGTERM/SIGINT; bad input over raw sockets (4xx JSON errors, 413, slowloris). Each class
starts its own `inferno serve --port 0` and stops it, failing if it died or panicked. Run by
tests/tests/serve.rs with scripts/setup-python.sh's venv:
    INFERNO_BIN=target/release/inferno INFERNO_MODEL=model.gguf $INFERNO_PYTHON tests/python/test_serve.py
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("INFERNO_BIN") or str(REPO / "target/release/inferno")
CACHE = Path(os.environ.get("INFERNO_CACHE") or Path.home() / ".cache/inferno")
MODEL = os.environ.get("INFERNO_MODEL") or str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = Path(MODEL).name.removesuffix(".gguf")
CONTEXT = 8192  # SmolLM2-135M's context
THREADS = "2"

GREEDY = {"temperature": 0.0}


class Server:
    """One `inferno serve` process on a free port; its stderr goes to a temporary file."""

    def __init__(self, *flags):
        self.log = tempfile.NamedTemporaryFile(prefix="inferno-serve-", suffix=".log", delete=False)
        args = [BIN, "serve", "--model", MODEL, "--port", "0", "--threads", THREADS, *flags]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = [None]
        reader = threading.Thread(target=lambda: line.__setitem__(0, self.process.stdout.readline()))
        reader.start()
        reader.join(120)
        prefix = "inferno serve: listening on "
        if not line[0] or not line[0].startswith(prefix):
            self.stop()
            raise RuntimeError(f"{' '.join(args)} printed {line[0]!r}, not '{prefix}URL':\n{self.log_tail()}")
        self.url = line[0][len(prefix) :].strip()
        self.host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)

    def client(self, timeout=300.0):
        # No retries: a retried request would hide the status the server answered.
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, parsed JSON or raw bytes) of one request on a fresh connection."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            try:
                return response.status, json.loads(data)
            except ValueError:
                return response.status, data
        finally:
            conn.close()

    def metrics(self):
        """The /metrics gauges and counters by name (no labels are used)."""
        status, text = self.request("GET", "/metrics")
        assert status == 200 and isinstance(text, bytes), (status, text)
        text = text.decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(None, 1)
                values[name.split("{")[0]] = float(value)
        return values

    def log_tail(self, lines=40):
        self.log.flush()
        return "".join(Path(self.log.name).read_text(errors="replace").splitlines(True)[-lines:])

    def stop(self):
        """Stops the server; returns None, or what went wrong: it had died, or its log has a panic."""
        died = self.process.poll()
        if died is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        log = self.log_tail(10**6)
        self.process.stdout.close()
        self.log.close()
        os.unlink(self.log.name)
        if died is not None:
            return f"the server had exited ({died}):\n{log[-4000:]}"
        if "panicked" in log:
            return f"the server panicked:\n{log[-4000:]}"
        return None


def user(text):
    return [{"role": "user", "content": text}]


def chat_reply(client, messages, stream=False, **options):
    """(text, finish_reason, logprobs, usage) of one chat request; logprobs as plain tuples so
    replies compare with ==, floats included."""
    options.setdefault("max_tokens", 16)
    if not stream:
        r = client.chat.completions.create(model=MODEL_ID, messages=messages, **options)
        choice = r.choices[0]
        content = choice.logprobs.content if choice.logprobs else None
        return choice.message.content, choice.finish_reason, logprob_tuples(content or []), r.usage
    chunks = client.chat.completions.create(
        model=MODEL_ID, messages=messages, stream=True, stream_options={"include_usage": True}, **options
    )
    text, finish, logprobs, usage = "", None, [], None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                text += choice.delta.content
            if choice.logprobs and choice.logprobs.content:
                logprobs += logprob_tuples(choice.logprobs.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    return text, finish, logprobs, usage


def logprob_tuples(content):
    return [
        (
            t.token,
            t.logprob,
            tuple(t.bytes or ()),
            tuple((a.token, a.logprob, tuple(a.bytes or ())) for a in t.top_logprobs),
        )
        for t in content
    ]


def cached_tokens(usage):
    return usage.prompt_tokens_details.cached_tokens


class ServerTestCase(unittest.TestCase):
    """One server for the class, stopped at its end."""

    flags = ()

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.flags)
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        trouble = cls.server.stop()
        if trouble:
            raise AssertionError(f"{cls.__name__}: {trouble}")

    def assertHealthy(self):
        self.assertEqual(self.server.request("GET", "/health"), (200, {"status": "ok"}))


class OpenAIClientTest(ServerTestCase):
    def test_models_lists_the_file_name_and_health_is_ok(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [MODEL_ID])
        self.assertEqual((models.data[0].object, models.data[0].owned_by), ("model", "inferno"))
        self.assertHealthy()

    def test_chat_streamed_equals_not_streamed_greedy(self):
        messages = user("What is the capital of France?")
        options = dict(max_tokens=24, logprobs=True, top_logprobs=2, **GREEDY)
        text, finish, logprobs, usage = chat_reply(self.client, messages, **options)
        streamed, streamed_finish, streamed_logprobs, streamed_usage = chat_reply(
            self.client, messages, stream=True, **options
        )
        self.assertTrue(text)
        self.assertEqual(streamed, text)
        self.assertEqual(len(logprobs), usage.completion_tokens)
        self.assertEqual(streamed_logprobs, logprobs)
        self.assertEqual(streamed_finish, finish)
        self.assertIn(finish, ("stop", "length"))
        self.assertEqual(streamed_usage.prompt_tokens, usage.prompt_tokens)
        self.assertEqual(streamed_usage.completion_tokens, usage.completion_tokens)
        self.assertEqual(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens)
        self.assertEqual(finish == "length", usage.completion_tokens == 24)

    def test_chat_model_default_or_omitted_and_unknown_fields_ignored(self):
        messages = user("Name a color.")
        expected = chat_reply(self.client, messages, max_tokens=8, **GREEDY)[0]
        r = self.client.chat.completions.create(model="default", messages=messages, max_tokens=8, **GREEDY)
        self.assertEqual(r.choices[0].message.content, expected)
        self.assertEqual(r.model, MODEL_ID)
        # No `model` at all, and fields the server does not know (ignored, as OpenAI clients send extras).
        raw = {
            "messages": messages,
            "max_tokens": 8,
            "user": "tester",
            "some_future_field": {"x": [1]},
            **GREEDY,
        }
        status, body = self.server.request("POST", "/v1/chat/completions", raw)
        self.assertEqual(status, 200)
        self.assertEqual(body["choices"][0]["message"]["content"], expected)

    def test_completions_streamed_equals_not_streamed_with_logprobs(self):
        options = dict(model=MODEL_ID, prompt="1, 2, 3, 4, 5,", max_tokens=16, logprobs=2, **GREEDY)
        r = self.client.completions.create(**options)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 16)
        self.assertTrue(choice.text.startswith(" 6, 7"), choice.text)
        lp = choice.logprobs
        self.assertEqual(len(lp.tokens), 16)
        self.assertEqual("".join(lp.tokens), choice.text)
        self.assertEqual(len(lp.token_logprobs), 16)
        self.assertTrue(all(len(top) == 2 for top in lp.top_logprobs))
        self.assertEqual(lp.text_offset, [sum(len(t) for t in lp.tokens[:i]) for i in range(16)])
        text, tokens, token_logprobs, top, finish = "", [], [], [], None
        for chunk in self.client.completions.create(stream=True, **options):
            for c in chunk.choices:
                text += c.text
                if c.logprobs:
                    tokens += c.logprobs.tokens
                    token_logprobs += c.logprobs.token_logprobs
                    top += c.logprobs.top_logprobs
                finish = c.finish_reason or finish
        self.assertEqual(text, choice.text)
        self.assertEqual(finish, "length")
        self.assertEqual(tokens, lp.tokens)
        self.assertEqual(token_logprobs, lp.token_logprobs)
        self.assertEqual(top, lp.top_logprobs)

    def test_seed_reproducible_at_temperature_0_8_streamed_or_not(self):
        messages = user("Tell me a story about a dragon.")
        options = dict(max_tokens=24, temperature=0.8, seed=1234)
        first = chat_reply(self.client, messages, **options)
        second = chat_reply(self.client, messages, **options)
        streamed = chat_reply(self.client, messages, stream=True, **options)
        self.assertTrue(first[0])
        self.assertEqual(second[:2], first[:2])
        self.assertEqual(streamed[:2], first[:2])
        for usage in (first[3], second[3], streamed[3]):
            self.assertEqual(usage.prompt_tokens, first[3].prompt_tokens)
            self.assertEqual(usage.completion_tokens, first[3].completion_tokens)
            self.assertEqual(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens)
        self.assertLessEqual(first[3].completion_tokens, 24)
        self.assertEqual(first[1] == "length", first[3].completion_tokens == 24)

    def test_speculative_on_equals_off(self):
        messages = user("Repeat exactly: one two three four, one two three four, one two three four.")
        off = chat_reply(self.client, messages, max_tokens=24, extra_body={"speculative": False}, **GREEDY)
        on = chat_reply(self.client, messages, max_tokens=24, extra_body={"speculative": True}, **GREEDY)
        self.assertEqual(on[:2], off[:2])
        seeded = dict(max_tokens=24, temperature=0.7, seed=99)
        self.assertEqual(
            chat_reply(self.client, messages, extra_body={"speculative": True}, **seeded)[:2],
            chat_reply(self.client, messages, extra_body={"speculative": False}, **seeded)[:2],
        )

    def test_logprobs_are_of_the_raw_logits_whatever_the_sampler(self):
        messages = user("Hi there")
        greedy = chat_reply(self.client, messages, max_tokens=3, logprobs=True, top_logprobs=3, **GREEDY)[2]
        self.assertEqual(len(greedy), 3)
        for token, logprob, _, top in greedy:
            self.assertEqual((token, logprob), top[0][:2])  # greedy takes the most likely
            self.assertTrue(all(a[1] >= b[1] for a, b in zip(top, top[1:])))
            self.assertLess(logprob, 0.0)
        hot = chat_reply(
            self.client,
            messages,
            max_tokens=3,
            logprobs=True,
            top_logprobs=3,
            temperature=1.5,
            seed=3,
            presence_penalty=1.0,
            extra_body={"top_k": 5, "repetition_penalty": 1.3},
        )[2]
        # The first position has the same context: the same distribution, bit for bit.
        self.assertEqual(hot[0][3], greedy[0][3])

    def test_max_completion_tokens_and_max_tokens_limit_the_reply(self):
        r = self.client.chat.completions.create(
            model=MODEL_ID, messages=user("Tell me a long story."), max_completion_tokens=5, **GREEDY
        )
        self.assertEqual((r.usage.completion_tokens, r.choices[0].finish_reason), (5, "length"))
        r = self.client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=7, **GREEDY)
        self.assertEqual((r.usage.completion_tokens, r.choices[0].finish_reason), (7, "length"))

    def test_stop_string_ends_the_reply_before_it(self):
        text, finish, _, _ = chat_reply(
            self.client, user("Write two sentences about the moon."), max_tokens=24, stop=["."], **GREEDY
        )
        full = chat_reply(self.client, user("Write two sentences about the moon."), max_tokens=24, **GREEDY)[
            0
        ]
        if "." in full:
            self.assertEqual(finish, "stop")
            self.assertEqual(text, full[: full.index(".")])
        else:
            self.assertEqual(text, full)

    def test_unknown_model_raises_not_found_error(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="gpt-nonexistent", messages=user("Hi"), max_tokens=4)
        self.assertEqual(e.exception.code, "model_not_found")
        self.assertEqual(e.exception.type, "not_found_error")
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="gpt-nonexistent", prompt="Hi", max_tokens=4)

    def test_bad_requests_raise_bad_request_error(self):
        cases = {
            "empty messages": dict(messages=[]),
            "n=2": dict(messages=user("Hi"), n=2),
            "negative max_tokens": dict(messages=user("Hi"), max_tokens=-3),
            "max_tokens over the context": dict(messages=user("Hi"), max_tokens=CONTEXT + 1),
            "prompt over the context": dict(messages=user("word " * 9000)),
            "temperature -1": dict(messages=user("Hi"), temperature=-1),
            "top_logprobs 21": dict(messages=user("Hi"), logprobs=True, top_logprobs=21),
        }
        for name, options in cases.items():
            with self.subTest(name), self.assertRaises(openai.BadRequestError) as e:
                options.setdefault("max_tokens", 4)
                self.client.chat.completions.create(model=MODEL_ID, **options)
            self.assertEqual(e.exception.status_code, 400)
            self.assertEqual(e.exception.type, "invalid_request_error")
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=MODEL_ID, prompt="", max_tokens=4)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=4, logprobs=6)
        self.assertHealthy()


# Eight requests with different prompts (so different lengths, one of ~500 tokens whose prefill
# runs in chunks beside the others' decoding) and samplers.
CONCURRENT = [
    (
        user(
            "Summarize this in one sentence: "
            + "The river rose after a week of rain, and the town moved " * 40
        ),
        dict(max_tokens=24, **GREEDY, logprobs=True, top_logprobs=3),
    ),
    (user("What is 2 + 2?"), dict(max_tokens=20, temperature=0.8, seed=1, logprobs=True, top_logprobs=3)),
    (user("List five fruits."), dict(max_tokens=24, temperature=1.0, seed=42, extra_body={"top_k": 20})),
    (
        [{"role": "system", "content": "You are a pirate."}, *user("Describe your ship in detail.")],
        dict(max_tokens=24, temperature=0.7, seed=7, top_p=0.9, logprobs=True, top_logprobs=3),
    ),
    (
        user("Explain photosynthesis to a child."),
        dict(
            max_tokens=22, temperature=0.9, seed=3, extra_body={"min_p": 0.1}, logprobs=True, top_logprobs=3
        ),
    ),
    (
        user("Say 'hello' many times."),
        dict(
            max_tokens=24,
            temperature=0.8,
            seed=5,
            presence_penalty=0.6,
            frequency_penalty=0.4,
            extra_body={"repetition_penalty": 1.15},
            logprobs=True,
            top_logprobs=3,
        ),
    ),
    (user("Write two sentences about the moon."), dict(max_tokens=24, **GREEDY, stop=[".", "\n"])),
    (
        user("Give me a recipe for pancakes with all the steps."),
        dict(max_tokens=24, temperature=0.6, seed=11, logprobs=True, top_logprobs=3),
    ),
]


class ConcurrencyTest(ServerTestCase):
    def test_8_concurrent_streams_equal_each_alone_bitwise(self):
        alone = [chat_reply(self.client, m, stream=True, **dict(o))[:3] for m, o in CONCURRENT]
        for (text, finish, logprobs), (_, o) in zip(alone, CONCURRENT):
            self.assertTrue(text)
            if o.get("logprobs"):
                self.assertTrue(logprobs and all(len(t[3]) == 3 for t in logprobs))
        before = self.server.metrics()
        barrier = threading.Barrier(len(CONCURRENT))
        most_active = [0]
        done = threading.Event()

        def watch():
            while not done.is_set():
                most_active[0] = max(most_active[0], self.server.metrics()["inferno_active_streams"])
                time.sleep(0.05)

        def run(i):
            messages, options = CONCURRENT[i]
            options = dict(options)
            if i % 2 == 0:
                # Half of them prefill their whole prompt again (the runs alone left it cached).
                options["extra_body"] = {**options.get("extra_body", {}), "cache_prompt": False}
            client = self.server.client()
            barrier.wait()
            try:
                return chat_reply(client, messages, stream=True, **options)[:3]
            finally:
                client.close()

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with ThreadPoolExecutor(len(CONCURRENT)) as pool:
                together = list(pool.map(run, range(len(CONCURRENT))))
        finally:
            done.set()
            watcher.join()
        after = self.server.metrics()
        for i, (a, t) in enumerate(zip(alone, together)):
            with self.subTest(request=i, options=CONCURRENT[i][1]):
                self.assertEqual(t[0], a[0])
                self.assertEqual(t[1], a[1])
                self.assertEqual(t[2], a[2])
        self.assertGreaterEqual(most_active[0], 2, "the streams never overlapped")
        steps = after["inferno_batch_steps_total"] - before["inferno_batch_steps_total"]
        tokens = after["inferno_batched_tokens_total"] - before["inferno_batched_tokens_total"]
        self.assertGreater(tokens, steps, "no step decoded more than one stream")


class PrefixCacheTest(ServerTestCase):
    def test_second_turn_reuses_the_first_and_equals_uncached(self):
        for first_message, options in (
            ("Name three colors.", GREEDY),
            ("Name three shapes.", dict(temperature=0.8, seed=9)),
        ):
            with self.subTest(options=options):
                history = user(first_message)
                first, _, _, first_usage = chat_reply(self.client, history, max_tokens=16, **options)
                messages = [
                    *history,
                    {"role": "assistant", "content": first},
                    *user("Now name three animals."),
                ]
                cached = chat_reply(self.client, messages, max_tokens=16, **options)
                uncached = chat_reply(
                    self.client, messages, max_tokens=16, extra_body={"cache_prompt": False}, **options
                )
                self.assertGreater(cached_tokens(cached[3]), 0)
                self.assertGreaterEqual(cached_tokens(cached[3]), first_usage.prompt_tokens)
                self.assertLess(cached_tokens(cached[3]), cached[3].prompt_tokens)
                self.assertEqual(cached_tokens(uncached[3]), 0)
                self.assertEqual(cached[3].prompt_tokens, uncached[3].prompt_tokens)
                self.assertEqual(cached[:2], uncached[:2])

    def test_compose_prefills_the_draft_and_the_reply_is_unchanged(self):
        history = [
            {"role": "system", "content": "You are a terse assistant."},
            *user("Pick a fruit."),
            {"role": "assistant", "content": "Mango."},
        ]
        draft = "Why did you pick that one over a banana?"
        status, composed = self.server.request("POST", "/v1/compose", {"messages": history, "draft": draft})
        self.assertEqual(status, 200, composed)
        self.assertGreater(composed["prefilled"], 0)
        self.assertEqual(composed["tokens"], composed["reused"] + composed["prefilled"])
        # A second compose of the same text has nothing left to prefill.
        status, again = self.server.request("POST", "/v1/compose", {"messages": history, "draft": draft})
        self.assertEqual((status, again["prefilled"], again["tokens"]), (200, 0, composed["tokens"]))
        messages = [*history, *user(draft)]
        reply = chat_reply(self.client, messages, max_tokens=16, **GREEDY)
        self.assertGreaterEqual(cached_tokens(reply[3]), composed["tokens"])
        uncached = chat_reply(
            self.client, messages, max_tokens=16, extra_body={"cache_prompt": False}, **GREEDY
        )
        self.assertEqual(cached_tokens(uncached[3]), 0)
        self.assertEqual(reply[:2], uncached[:2])

    def test_compose_then_a_different_final_message_is_still_right(self):
        # Sending re-syncs to the final text: a compose of a draft the user then edited only saves work.
        history = user("Hello!")
        status, _ = self.server.request(
            "POST", "/v1/compose", {"messages": history, "draft": "What is the tallest mountain"}
        )
        self.assertEqual(status, 200)
        messages = [*history, {"role": "assistant", "content": "Hi."}, *user("What is the longest river?")]
        status, _ = self.server.request(
            "POST", "/v1/compose", {"messages": messages[:2], "draft": "What is the tallest mountain"}
        )
        self.assertEqual(status, 200)
        reply = chat_reply(self.client, messages, max_tokens=12, **GREEDY)
        uncached = chat_reply(
            self.client, messages, max_tokens=12, extra_body={"cache_prompt": False}, **GREEDY
        )
        self.assertEqual(reply[:2], uncached[:2])


def raw_stream_request(server, path, body):
    """A socket with `body` POSTed to `path`, its response not yet read."""
    data = json.dumps(body).encode()
    sock = socket.create_connection((server.host, server.port), timeout=60)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode() + data
    )
    return sock


def read_until(sock, predicate, timeout=60):
    received = b""
    deadline = time.monotonic() + timeout
    while not predicate(received):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; received {received[-500:]!r}")
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def poll(condition, timeout, every=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


# A prompt that keeps the model counting: replies run to max_tokens.
LONG = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 2000, "temperature": 0, "stream": True}


class DisconnectTest(ServerTestCase):
    flags = ("--parallel", "1")  # so a second request waits in the queue

    def test_disconnect_mid_stream_cancels_and_frees_the_slot(self):
        before = self.server.metrics()
        for path, body in (
            ("/v1/completions", LONG),
            (
                "/v1/chat/completions",
                {**LONG, "prompt": None, "messages": user("Count from 1 to 2000, separated by commas.")},
            ),
        ):
            with self.subTest(path=path):
                sock = raw_stream_request(self.server, path, body)
                head = read_until(sock, lambda r: r.count(b"data: ") >= 2)
                self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:200])
                sock.close()
        m = {}

        def settled():
            m.update(self.server.metrics())
            return (
                m["inferno_active_streams"] == 0
                and m["inferno_requests_cancelled_total"] >= before["inferno_requests_cancelled_total"] + 2
            )

        self.assertTrue(poll(settled, 20), f"after 20 s: {m}")
        generated = m["inferno_generated_tokens_total"] - before["inferno_generated_tokens_total"]
        self.assertLess(generated, 2 * 2000, "the streams ran to their end")
        # The slot is free: a new request is served.
        self.assertEqual(chat_reply(self.client, user("Hi"), max_tokens=4, **GREEDY)[1], "length")

    def test_disconnect_while_queued_leaves_the_queue(self):
        running = raw_stream_request(self.server, "/v1/completions", LONG)
        try:
            read_until(running, lambda r: r.count(b"data: ") >= 2)
            queued = raw_stream_request(self.server, "/v1/completions", {**LONG, "prompt": "a, b, c, d, e,"})
            self.assertTrue(poll(lambda: self.server.metrics()["inferno_queue_depth"] == 1, 10))
            before = self.server.metrics()["inferno_requests_cancelled_total"]
            queued.close()
            self.assertTrue(
                poll(lambda: self.server.metrics()["inferno_queue_depth"] == 0, 20),
                "the request stayed queued",
            )
            self.assertEqual(self.server.metrics()["inferno_requests_cancelled_total"], before + 1)
            self.assertEqual(self.server.metrics()["inferno_active_streams"], 1)
        finally:
            running.close()
        self.assertTrue(poll(lambda: self.server.metrics()["inferno_active_streams"] == 0, 20))


class BurstTest(ServerTestCase):
    flags = ("--ctx-budget", "48M", "--parallel", "4")

    def test_burst_of_50_long_prompts_stays_within_the_kv_budget(self):
        # Each request needs ~600 positions x 23040 KV bytes (SmolLM2, f16 K and V) ~ 14 MB, so
        # the 48M budget, not --parallel 4, limits how many run at once (3), and cached prefixes
        # must be evicted to admit more. (1500-token prompts would hold it to one at a time and
        # take 5 minutes of prefill on 2 cores.)
        words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()

        def run(i):
            # About 600 tokens, different from the first word on, so no two share a prefix.
            text = " ".join(words[(i * 7 + j * (1 + i % 5)) % len(words)] for j in range(440))
            client = self.server.client(timeout=600)
            try:
                r = client.chat.completions.create(
                    model=MODEL_ID, messages=user(f"{i}: {text}"), max_tokens=4, **GREEDY
                )
                return ("ok", r.usage.prompt_tokens, r.usage.completion_tokens)
            except openai.APIStatusError as e:
                return ("error", e.status_code, str(e))
            finally:
                client.close()

        with ThreadPoolExecutor(50) as pool:
            results = list(pool.map(run, range(50)))
        failures = [r for r in results if r[0] != "ok" and not (400 <= r[1] < 500)]
        self.assertEqual(failures, [])
        served = [r for r in results if r[0] == "ok"]
        self.assertGreater(len(served), 0, results)
        for _, prompt_tokens, completion_tokens in served:
            self.assertGreater(prompt_tokens, 400)
            self.assertEqual(completion_tokens, 4)
        m = self.server.metrics()
        self.assertEqual(m["inferno_kv_budget_bytes"], 48 << 20)
        self.assertGreater(m["inferno_kv_bytes_peak"], 0)
        self.assertLessEqual(m["inferno_kv_bytes_peak"], m["inferno_kv_budget_bytes"])
        self.assertLessEqual(m["inferno_kv_bytes"], m["inferno_kv_budget_bytes"])
        self.assertEqual((m["inferno_active_streams"], m["inferno_queue_depth"]), (0, 0))
        self.assertHealthy()

    def test_a_request_needing_more_than_the_budget_is_400(self):
        # (31 + 4000) positions x 23040 bytes = 93 MB > 48M; max_tokens past the context counts
        # only up to the context.
        for max_tokens in (4000, CONTEXT):
            with self.subTest(max_tokens=max_tokens), self.assertRaises(openai.BadRequestError):
                self.client.chat.completions.create(
                    model=MODEL_ID, messages=user("Hi"), max_tokens=max_tokens
                )
        self.assertEqual(self.server.metrics()["inferno_active_streams"], 0)


def assert_error_shape(test, body, status=None):
    """The error JSON of the spec; its `type` checked against `status` when given."""
    test.assertIsInstance(body, dict, body)
    test.assertEqual(set(body), {"error"}, body)
    error = body["error"]
    test.assertEqual(set(error), {"message", "type", "param", "code"}, error)
    test.assertIsInstance(error["message"], str)
    test.assertTrue(error["message"])
    if status is not None:
        kind = (
            "not_found_error"
            if status == 404
            else "invalid_request_error" if status < 500 else "server_error"
        )
        test.assertEqual(error["type"], kind, error)
    return error


class BadInputTest(ServerTestCase):
    flags = ("--max-body", "64K", "--header-timeout", "2")

    def tearDown(self):
        self.assertHealthy()

    def post(self, body, path="/v1/chat/completions", headers=None):
        return self.server.request("POST", path, body, headers)

    def assertError(self, response, status, param="unset", code="unset"):
        got, body = response
        self.assertEqual(got, status, body)
        error = assert_error_shape(self, body, status)
        if param != "unset":
            self.assertEqual(error["param"], param, error)
        if code != "unset":
            self.assertEqual(error["code"], code, error)

    def test_malformed_json_is_400(self):
        nested = (
            b'{"messages": ' + b"[" * 30000 + b"]" * 30000 + b"}"
        )  # a parser without a depth limit would overflow its stack
        for body in (
            b'{"messages": [',
            b"",
            b"not json",
            b'{"messages": [{"role": "user", "content": "Hi"}]}}',
            nested,
        ):
            with self.subTest(body=body):
                self.assertError(self.post(body), 400)
        self.assertError(self.post(b"[1, 2]"), 400)
        self.assertError(self.post(b'{"prompt": "Hi",', path="/v1/completions"), 400)

    def test_wrong_types_are_400_naming_the_field(self):
        hi = user("Hi")
        self.assertError(self.post({"messages": "Hi"}), 400, param="messages")
        self.assertError(self.post({"messages": hi, "max_tokens": "x"}), 400, param="max_tokens")
        self.assertError(self.post({"messages": hi, "temperature": "hot"}), 400, param="temperature")
        self.assertError(self.post({"messages": hi, "stream": "yes"}), 400, param="stream")
        self.assertError(self.post({"messages": [{"role": "user", "content": 5}]}), 400)
        self.assertError(self.post({"messages": [{"content": "Hi"}]}), 400)
        self.assertError(self.post({"prompt": 5}, path="/v1/completions"), 400, param="prompt")

    def test_empty_messages_and_prompt_are_400(self):
        self.assertError(self.post({"messages": []}), 400, param="messages")
        self.assertError(self.post({"max_tokens": 4}), 400, param="messages")
        self.assertError(self.post({"prompt": ""}, path="/v1/completions"), 400, param="prompt")

    def test_unknown_model_is_404(self):
        self.assertError(
            self.post({"model": "nope", "messages": user("Hi")}), 404, param="model", code="model_not_found"
        )
        self.assertError(
            self.post({"model": "nope", "prompt": "Hi"}, path="/v1/completions"), 404, code="model_not_found"
        )

    def test_negative_and_huge_max_tokens_are_400(self):
        for value in (-1, -(2**40), CONTEXT + 1, 10**12, 2**70):
            with self.subTest(max_tokens=value):
                self.assertError(
                    self.post({"messages": user("Hi"), "max_tokens": value}), 400, param="max_tokens"
                )
        self.assertError(self.post({"messages": user("Hi"), "max_completion_tokens": -5}), 400)

    def test_n_2_and_bad_sampler_values_are_400(self):
        hi = user("Hi")
        self.assertError(self.post({"messages": hi, "n": 2}), 400, param="n")
        for field, value in (
            ("temperature", -0.5),
            ("top_p", 1.5),
            ("min_p", -1),
            ("top_k", -1),
            ("presence_penalty", 9),
        ):
            with self.subTest(field=field):
                self.assertError(self.post({"messages": hi, field: value, "max_tokens": 4}), 400, param=field)

    def test_prompt_over_context_is_400(self):
        self.assertError(self.post({"messages": user("word " * 9000), "max_tokens": 4}), 400)
        self.assertError(self.post({"prompt": "word " * 9000, "max_tokens": 4}, path="/v1/completions"), 400)

    def test_invalid_utf8_is_400(self):
        self.assertError(self.post(b'{"messages": [{"role": "user", "content": "Hi \xff\xfe there"}]}'), 400)
        self.assertError(self.post(b'{"prompt": "\xc3\x28", "max_tokens": 4}', path="/v1/completions"), 400)

    def test_oversized_body_is_413(self):
        big = json.dumps({"messages": user("x" * (100 << 10)), "max_tokens": 4}).encode()
        self.assertError(self.post(big), 413)
        # The same body sent chunked (no Content-Length up front): the server may answer as
        # soon as the limit is passed, so the rest may not be sent.
        sock = socket.create_connection((self.server.host, self.server.port), timeout=10)
        try:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            try:
                for i in range(0, len(big), 8192):
                    piece = big[i : i + 8192]
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sock.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                received = read_until(sock, lambda r: b"\r\n\r\n" in r, timeout=10)
            except ConnectionResetError:
                received = b"(connection reset)"
        finally:
            sock.close()
        self.assertTrue(received.startswith(b"HTTP/1.1 413"), received[:300])
        # A Content-Length over the limit is refused before the body is sent.
        sock = socket.create_connection((self.server.host, self.server.port), timeout=10)
        try:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 10000000\r\n\r\n{"
            )
            head = read_until(sock, lambda r: b"\r\n\r\n" in r, timeout=10)
        finally:
            sock.close()
        self.assertTrue(head.startswith(b"HTTP/1.1 413"), head[:200])

    def test_failed_requests_are_counted(self):
        before = self.server.metrics()["inferno_requests_failed_total"]
        self.post(b"{")
        self.post({"messages": []})
        self.post({"model": "nope", "messages": user("Hi")})
        self.assertEqual(self.server.metrics()["inferno_requests_failed_total"], before + 3)

    def test_unknown_route_is_404_and_wrong_method_405(self):
        status, body = self.server.request("GET", "/v1/nothing-here")
        self.assertEqual(status, 404)
        assert_error_shape(self, body, 404)
        status, body = self.server.request("GET", "/v1/chat/completions")
        self.assertEqual(status, 405)
        assert_error_shape(self, body, 405)

    def test_slowloris_connection_is_closed_while_others_are_served(self):
        for trickle in (False, True):
            with self.subTest(trickle=trickle):
                sock = socket.create_connection((self.server.host, self.server.port), timeout=10)
                start = time.monotonic()
                closed_after = None
                try:
                    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
                    self.assertHealthy()
                    sock.settimeout(0.5)
                    while time.monotonic() - start < 8:
                        try:
                            if trickle:
                                sock.sendall(b"X")  # one more byte of a header that never ends
                            data = sock.recv(4096)
                        except socket.timeout:
                            continue
                        except (BrokenPipeError, ConnectionResetError):
                            data = b""
                        if not data or data.startswith(b"HTTP/1.1 408"):
                            closed_after = time.monotonic() - start
                            break
                finally:
                    sock.close()
                self.assertIsNotNone(closed_after, "the idle connection was still open after 8 s")
                self.assertLessEqual(closed_after, 6)
                self.assertGreaterEqual(closed_after, 1.5)


class TimeoutTest(ServerTestCase):
    flags = ("--timeout", "2")

    def test_a_request_past_the_timeout_ends_with_an_error_event(self):
        before = self.server.metrics()
        sock = raw_stream_request(self.server, "/v1/completions", LONG)
        start = time.monotonic()
        try:
            received = read_until(sock, lambda r: b"data: [DONE]" in r, timeout=30)
        finally:
            sock.close()
        self.assertLess(time.monotonic() - start, 15)
        events = [
            json.loads(line[6:]) for line in received.decode().splitlines() if line.startswith("data: {")
        ]
        self.assertIn("error", events[-1], events[-1])
        assert_error_shape(self, events[-1])
        self.assertTrue(
            poll(
                lambda: self.server.metrics()["inferno_requests_cancelled_total"]
                > before["inferno_requests_cancelled_total"],
                5,
            )
        )
        self.assertEqual(chat_reply(self.client, user("Hi"), max_tokens=4, **GREEDY)[1], "length")

    def test_a_request_past_the_timeout_not_streamed_is_408(self):
        start = time.monotonic()
        status, body = self.server.request("POST", "/v1/completions", {**LONG, "stream": False})
        self.assertEqual(status, 408, body)
        assert_error_shape(self, body, 408)
        self.assertLess(time.monotonic() - start, 15)


class ShutdownTest(unittest.TestCase):
    def test_sigterm_and_sigint_end_running_streams_and_exit_0(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                server = Server()
                try:
                    sock = raw_stream_request(server, "/v1/completions", LONG)
                    read_until(sock, lambda r: r.count(b"data: ") >= 2)
                    start = time.monotonic()
                    server.process.send_signal(sig)
                    rest = read_until(sock, lambda r: b"data: [DONE]" in r, timeout=10)
                    sock.close()
                    self.assertIn(b"data: [DONE]", rest)
                    self.assertEqual(server.process.wait(10), 0, server.log_tail())
                    self.assertLess(time.monotonic() - start, 10)
                finally:
                    trouble = server.stop() or ""
                self.assertNotIn("panicked", trouble)


if __name__ == "__main__":
    if not Path(BIN).is_file() or not Path(MODEL).is_file():
        sys.exit(f"need INFERNO_BIN ({BIN}) and INFERNO_MODEL ({MODEL})")
    unittest.main(verbosity=2)
