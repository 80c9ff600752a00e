"""Time to a complete tool call: infergate against llama.cpp's own server with `--jinja`, in one
run on the same machine, the same GGUF (SmolLM2-135M-Instruct), threads and slots.

Each request offers tools and asks for a call (`tool_choice` "required", which both servers
enforce with a grammar; then a named function, which infergate enforces and llama-server is
asked for the same way), greedy, not streamed; the time is from sending the request to the
whole answer with its `tool_calls` (one call: `parallel_tool_calls` false). The servers
alternate by round. llama-server renders the model's own template (SmolLM2's, which has no
tools: it answers in prose, and the line says how many answers held no call);
`--peer-template FILE` gives it another (e.g. a ChatML template with tools from llama.cpp's
models/templates). Printed per case: the median
time on each, the ratio (infergate / llama-server: below 1 is faster), completion tokens per
call on each (the call's JSON as each server's format writes it), and whether every answer
held a call whose arguments parse as JSON.

Usage: python bench/llm_tools.py --bin target/release/infergate [--llama-server PATH]
         [--rounds 4] [--requests 6] [--threads 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import httpx2 as httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm import ROOT, Infergate, LlamaServer  # noqa: E402

SLOTS, CONTEXT = 2, 2048
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
]
QUESTIONS = ["What is the weather in Paris, in celsius?",
             "How warm is it in Tokyo right now? Use fahrenheit.",
             "Tell me the weather in Berlin in celsius."]
# One call per answer (`parallel_tool_calls` false): the time to a complete call, not to as many
# calls as a small model strings together before `max_tokens`.
CASES = {
    "required": "required",
    "named": {"type": "function", "function": {"name": "get_weather"}},
}


def one_call(client, server, question, choice):
    body = {"model": server.model, "temperature": 0, "max_tokens": 128, "tools": TOOLS,
            "tool_choice": choice, "parallel_tool_calls": False,
            "messages": [{"role": "user", "content": question}]}
    started = time.perf_counter()
    r = client.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers)
    seconds = time.perf_counter() - started
    if r.status_code != 200:
        return seconds, 0, False, f"{r.status_code} {r.text[:200]}"
    answer = r.json()
    calls = answer["choices"][0]["message"].get("tool_calls") or []
    valid = bool(calls)
    for call in calls:
        try:
            json.loads(call["function"]["arguments"])
        except (KeyError, TypeError, ValueError):
            valid = False
    return seconds, answer["usage"]["completion_tokens"], valid, calls


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="the infergate binary")
    p.add_argument("--llama-server", default=None)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--peer-template", default=None,
                   help="a chat template file for llama-server (--chat-template-file)")
    a = p.parse_args()
    peer_bin = a.llama_server or subprocess.run(
        ["bash", os.path.join(ROOT, "bench", "setup-llama-server.sh")],
        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    servers = {
        "infergate": lambda: Infergate(a.bin, a.threads, SLOTS, CONTEXT),
        "llama-server": lambda: LlamaServer(peer_bin, a.threads, SLOTS, CONTEXT,
                                            extra=("--jinja",) + (
                                                ("--chat-template-file", a.peer_template)
                                                if a.peer_template else ())),
    }
    times, tokens, invalid, samples = {}, {}, {}, {}
    order = list(servers)
    for r in range(a.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            server = servers[name]()
            try:
                with httpx.Client(timeout=300) as client:
                    for case, choice in CASES.items():
                        one_call(client, server, QUESTIONS[0], choice)  # untimed: warm
                        for i in range(a.requests):
                            s, n, ok, calls = one_call(client, server,
                                                       QUESTIONS[i % len(QUESTIONS)], choice)
                            times.setdefault((name, case), []).append(s)
                            tokens.setdefault((name, case), []).append(n)
                            invalid[(name, case)] = invalid.get((name, case), 0) + (not ok)
                            samples.setdefault((name, case), calls)
            finally:
                server.stop()
    print(f"{a.requests} requests x {a.rounds} rounds per case, greedy, {a.threads} threads, "
          f"{SLOTS} slots, one request at a time")
    for case in CASES:
        ours, peer = times[("infergate", case)], times[("llama-server", case)]
        print(f"  tool_choice {case:<9} infergate {statistics.median(ours) * 1e3:7.1f} ms "
              f"({statistics.mean(tokens[('infergate', case)]):.0f} tokens, "
              f"{invalid[('infergate', case)]} without a valid call), llama-server "
              f"{statistics.median(peer) * 1e3:7.1f} ms "
              f"({statistics.mean(tokens[('llama-server', case)]):.0f} tokens, "
              f"{invalid[('llama-server', case)]} without a valid call): "
              f"{statistics.median(ours) / statistics.median(peer):.2f}x", flush=True)
        for name in servers:
            print(f"    {name}: {json.dumps(samples[(name, case)])[:240]}")


if __name__ == "__main__":
    sys.exit(main())
