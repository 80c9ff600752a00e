"""Chat-model serving against llama.cpp's own server, in one run on the same machine.

infergate (its chat model path: llama.cpp through llama-cpp-2, continuous batching) and
`llama-server` built from the same llama.cpp source with the same flags
(bench/setup-llama-server.sh) serve the same GGUF with the same threads, slots and context, and
are driven by the same bounded OpenAI-compatible load generator (streamed chat completions over
HTTP, greedy so both generate the same tokens). Prints, as ratios infergate / llama-server:
- generated tokens/s with 1 and with 8 concurrent streams,
- time to first token p50 with 8 concurrent streams,
and infergate's time to first token p50 with a shared ~500-token system prompt, prefix cache on
vs off (the gateway started with --llm-no-prefix-cache).

Usage: python bench/llm.py [--bin target/release/infergate] [--requests 24] [--threads 2] [--rounds 3]
Each round runs both servers one after the other (alternating which goes first) and gives its own
ratios; the medians over the rounds are printed last.
The gateway serves plain HTTP here (--insecure-http) so both servers are compared without TLS.
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx2 as httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("INFERGATE_MODELS", os.path.join(ROOT, ".cache", "models"))
GGUF = os.path.join(MODELS, "smollm2.gguf")
QUESTIONS = [
    "What is the capital city of France?", "Name three colours of the rainbow.",
    "What do bees make?", "How many legs does a spider have?", "What is the boiling point of water?",
    "Which planet is known as the red planet?", "What is the largest ocean on Earth?",
    "Who wrote Romeo and Juliet?", "What gas do plants take in?", "What is 12 times 12?",
    "Name a mammal that can fly.", "What is the freezing point of water in Fahrenheit?",
]
SYSTEM = ("You are a careful assistant for a museum of natural history. Visitors ask about "
          "animals, plants, rocks, the planets and the history of science. ") * 14


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, headers, deadline_s=180):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url, headers=headers, timeout=2)
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


class Infergate:
    def __init__(self, binary, threads, slots, context, prefix_cache=True, config=None, env=None):
        """`config`: TOML text for --config (e.g. an [llm.speculation] section); `env`: extra
        environment variables (e.g. OMP_WAIT_POLICY, read when llama.cpp's OpenMP loads)."""
        self.data = tempfile.mkdtemp(prefix="infergate-llm-bench-")
        subprocess.run([binary, "models", "add", "--data-dir", self.data, "--name", "smollm2", GGUF],
                       check=True, capture_output=True)
        port = free_port()
        args = [binary, "serve", "--data-dir", self.data, "--listen", f"127.0.0.1:{port}",
                "--insecure-http", "--no-grpc", "--llm-threads", str(threads),
                "--llm-max-sequences", str(slots), "--llm-context", str(context)]
        if not prefix_cache:
            args.append("--llm-no-prefix-cache")
        if config:
            path = os.path.join(self.data, "bench.toml")
            with open(path, "w") as f:
                f.write(config)
            args += ["--config", path]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})})
        key_file = os.path.join(self.data, "admin.key")
        deadline = time.monotonic() + 60
        while not os.path.exists(key_file):  # written by the first start
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("infergate did not start")
            time.sleep(0.1)
        with open(key_file) as f:
            key = f.read().strip()
        self.headers = {"Authorization": f"Bearer {key}"}
        self.url = f"http://127.0.0.1:{port}"
        wait_ready(f"{self.url}/v1/models", self.headers)
        self.model = "smollm2"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.data, ignore_errors=True)


class LlamaServer:
    def __init__(self, binary, threads, slots, context, extra=(), env=None):
        """`extra`: more llama-server arguments (e.g. --spec-type ngram-simple)."""
        port = free_port()
        self.proc = subprocess.Popen(
            [binary, "-m", GGUF, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
             "-tb", str(threads), "-np", str(slots), "-c", str(slots * context), "--kv-unified",
             "--no-webui", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
        self.headers = {}
        self.url = f"http://127.0.0.1:{port}"
        wait_ready(f"{self.url}/health", {})
        self.model = "smollm2"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


async def one_stream(client, server, messages, max_tokens):
    """One streamed chat completion: (time to first token, completion tokens, seconds)."""
    body = {"model": server.model, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    tokens = 0
    pieces = 0
    async with client.stream("POST", f"{server.url}/v1/chat/completions", json=body,
                             headers=server.headers) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    pieces += 1
                    if first is None:
                        first = time.perf_counter() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return first or 0.0, tokens or pieces, time.perf_counter() - started


async def load(server, concurrency, requests, max_tokens, system=None):
    """`requests` streams, `concurrency` at a time: (generated tokens/s, TTFT p50, TTFTs)."""
    queue = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(QUESTIONS[i % len(QUESTIONS)])
    ttfts, total = [], 0

    async def worker(client):
        nonlocal total
        while not queue.empty():
            q = queue.get_nowait()
            messages = ([{"role": "system", "content": system}] if system else []) + \
                [{"role": "user", "content": q}]
            try:
                ttft, tokens, _ = await one_stream(client, server, messages, max_tokens)
            except httpx.RemoteProtocolError:
                # llama-server sometimes closes a kept-alive connection after a streamed answer
                # without saying so; the request sent on it fails before anything is generated
                # and is sent again on a new connection (its time counts in the wall time).
                ttft, tokens, _ = await one_stream(client, server, messages, max_tokens)
            ttfts.append(ttft)
            total += tokens

    # Kept-alive connections, as an OpenAI client keeps them. A new connection per request
    # measured llama-server at 23.5 tokens/s for one stream instead of ~84 (its own timings): a
    # stall of ~40 ms per streamed token on a fresh connection (delayed ACK against small
    # writes), which is the transport, not the server's generation.
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        # Warm-up: loads the model (infergate loads on first use) and fills caches.
        await one_stream(client, server, [{"role": "user", "content": "Hi"}], 4)
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return total / wall, statistics.median(ttfts), ttfts


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "infergate"))
    p.add_argument("--llama-server", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating rounds of both servers; the ratios printed are their medians")
    a = p.parse_args()
    peer_bin = a.llama_server or subprocess.run(
        ["bash", os.path.join(ROOT, "bench", "setup-llama-server.sh")],
        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    servers = {"llama-server": lambda: LlamaServer(peer_bin, a.threads, a.slots, a.context),
               "infergate": lambda: Infergate(a.bin, a.threads, a.slots, a.context)}
    # This machine's speed moves by more than the gaps measured here from one minute to the
    # next, so the two servers alternate (each round starts with the one the last round ended
    # with) and each round gives its own ratios; their medians are the result.
    ratios = []
    order = ["llama-server", "infergate"]
    for r in range(1, a.rounds + 1):
        rows = {}
        for name in order:
            server = servers[name]()
            try:
                one = asyncio.run(load(server, 1, max(4, a.requests // 4), a.max_tokens))
                eight = asyncio.run(load(server, 8, a.requests, a.max_tokens))
                rows[name] = (one, eight)
                print(f"round {r} {name:>13}: 1 stream {one[0]:6.1f} tok/s (TTFT p50 {one[1]*1000:6.1f} ms); "
                      f"8 streams {eight[0]:6.1f} tok/s (TTFT p50 {eight[1]*1000:6.1f} ms)", flush=True)
            finally:
                server.stop()
        order.reverse()
        ours, peer = rows["infergate"], rows["llama-server"]
        ratios.append((ours[0][0] / peer[0][0], ours[1][0] / peer[1][0], ours[1][1] / peer[1][1]))
    for i, label in enumerate(("generated tokens/s, 1 stream: ", "generated tokens/s, 8 streams:",
                               "TTFT p50, 8 streams:          ")):
        each = ", ".join(f"{x[i]:.2f}" for x in ratios)
        print(f"{label} {statistics.median(x[i] for x in ratios):.2f}x llama-server (median; rounds: {each})")
    shared = {}
    for cache in (True, False):
        server = Infergate(a.bin, a.threads, a.slots, a.context, prefix_cache=cache)
        try:
            _, ttft, _ = asyncio.run(load(server, 1, 12, 8, system=SYSTEM))
            shared[cache] = ttft
        finally:
            server.stop()
    print(f"TTFT p50 with a shared {len(SYSTEM.split())}-word system prompt: prefix cache on "
          f"{shared[True]*1000:.1f} ms, off {shared[False]*1000:.1f} ms "
          f"({shared[False] / shared[True]:.2f}x better with the cache)")


if __name__ == "__main__":
    sys.exit(main())
