"""What chat guardrails cost, in one run on the demo chat model (SmolLM2-135M, GGUF).

One gateway (the release binary) serves the model; the example guardrails pii-mask and
blocked-terms (plugins/dist) are uploaded, and each round runs the same requests with the
model's guardrails detached and attached, in alternating order:
- whole answers: `--requests` chat completions (greedy, `--max-tokens`), one at a time;
- streamed answers: the same requests streamed (each piece of text through both guardrails'
  look-behind).
The prompts hold nothing either guardrail changes, so the model generates the same tokens in
both configurations (checked): the difference is the guardrails' work. Printed: the server's
CPU time (utime + stime of its process) per request and per streamed token with and without
guardrails, the difference, and the ratio; and, from /metrics when the server exports it, the
guardrails' own mean time per call (`infergate_guardrail_call_duration_seconds`).

Usage: python bench/guardrails.py --bin target/release/infergate [--rounds 4] [--requests 8]
         [--max-tokens 64] [--threads 2]
"""
import argparse
import json
import os
import statistics
import sys
import time

import httpx2 as httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_per_request import cpu_split  # noqa: E402
from llm import ROOT, Infergate  # noqa: E402

DIST = os.environ.get("INFERGATE_PLUGIN_DIST", os.path.join(ROOT, "plugins", "dist"))
PROMPTS = [
    "Describe the sea in two sentences.",
    "List five fruits and say one thing about each.",
    "Explain what a compiler does, briefly.",
    "Write a short poem about autumn leaves.",
]
GUARDRAILS = [{"plugin": "pii-mask"},
              {"plugin": "blocked-terms", "config": {"terms": ["zebra", "password"]}}]


def cpu_seconds(pid):
    return sum(cpu_split(pid))


def guardrail_means(client, server):
    """{phase: mean seconds per call} from the guardrail histogram, when exported."""
    text = client.get(f"{server.url}/metrics", headers=server.headers).text
    sums, counts = {}, {}
    for line in text.splitlines():
        if not line.startswith("infergate_guardrail_call_duration_seconds_"):
            continue
        name, value = line.rsplit(" ", 1)
        phase = name.split('phase="', 1)[1].split('"', 1)[0] if 'phase="' in name else "all"
        if name.startswith("infergate_guardrail_call_duration_seconds_sum"):
            sums[phase] = sums.get(phase, 0.0) + float(value)
        elif name.startswith("infergate_guardrail_call_duration_seconds_count"):
            counts[phase] = counts.get(phase, 0.0) + float(value)
    return {p: sums[p] / counts[p] for p in sums if counts.get(p)}


def run_pass(client, server, requests, max_tokens, stream):
    """(server CPU seconds, completion tokens, answers) for `requests` chat completions."""
    answers, tokens = [], 0
    before = cpu_seconds(server.proc.pid)
    for i in range(requests):
        body = {"model": server.model, "temperature": 0, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}
        if not stream:
            r = client.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers)
            r.raise_for_status()
            answer = r.json()
            answers.append(answer["choices"][0]["message"]["content"])
            tokens += answer["usage"]["completion_tokens"]
            continue
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        text = ""
        with client.stream("POST", f"{server.url}/v1/chat/completions", json=body,
                           headers=server.headers) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    text += (choice.get("delta") or {}).get("content") or ""
                if chunk.get("usage"):
                    tokens += chunk["usage"]["completion_tokens"]
        answers.append(text)
    return cpu_seconds(server.proc.pid) - before, tokens, answers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="the infergate binary")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    server = Infergate(a.bin, a.threads, 2, 1024)
    results = {}
    try:
        with httpx.Client(timeout=300) as client:
            for name in ("pii-mask", "blocked-terms"):
                with open(os.path.join(DIST, f"{name}.wasm"), "rb") as f:
                    r = client.post(f"{server.url}/api/plugins", content=f.read(),
                                    headers=server.headers)
                    r.raise_for_status()
            guards = f"{server.url}/api/models/{server.model}/guardrails"
            configs = {
                "none": lambda: client.delete(guards, headers=server.headers).raise_for_status(),
                "pii-mask + blocked-terms": lambda: client.put(
                    guards, json={"guardrails": GUARDRAILS},
                    headers=server.headers).raise_for_status(),
            }
            run_pass(client, server, len(PROMPTS), a.max_tokens, False)  # untimed: warm caches
            order = list(configs)
            for r in range(a.rounds):
                for name in (order if r % 2 == 0 else order[::-1]):
                    configs[name]()
                    for stream in (False, True):
                        results.setdefault((name, stream), []).append(
                            run_pass(client, server, a.requests, a.max_tokens, stream))
            means = guardrail_means(client, server)
    finally:
        server.stop()
    print(f"{a.requests} requests x {a.rounds} rounds, greedy, max {a.max_tokens} tokens, "
          f"{a.threads} llama.cpp threads; guardrails {', '.join(g['plugin'] for g in GUARDRAILS)}")
    for stream, unit in ((False, "request"), (True, "streamed token")):
        off, on = results[("none", stream)], results[("pii-mask + blocked-terms", stream)]
        differ = sum(x != y for a_, b_ in zip(on, off) for x, y in zip(a_[2], b_[2]))
        per = (lambda runs: [cpu / (a.requests if not stream else tokens)
                             for cpu, tokens, _ in runs])
        per_off, per_on = per(off), per(on)
        diffs = sorted(x - y for x, y in zip(per_on, per_off))
        ratios = sorted(x / y for x, y in zip(per_on, per_off))
        print(f"  CPU per {unit:<15} {statistics.median(per_on) * 1e3:8.3f} ms with, "
              f"{statistics.median(per_off) * 1e3:8.3f} ms without: "
              f"+{statistics.median(diffs) * 1e6:7.1f} us, {statistics.median(ratios):.3f}x "
              f"(rounds {', '.join(f'{x:.3f}' for x in ratios)}); {differ} answers differ")
    for phase, mean in sorted(means.items()):
        print(f"  guardrail calls ({phase}): {mean * 1e6:.1f} us each on average")


if __name__ == "__main__":
    sys.exit(main())
