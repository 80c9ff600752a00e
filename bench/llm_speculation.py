"""Speculative decoding against llama.cpp's server, in one run on the same machine.

The committed prompt set (llm/tests/data/speculation_prompts.json: code edits, list copies,
rewrites of a given text, and prose that never matches) is answered greedily (max 256 tokens)
at 1 and 8 concurrent streams by
- infergate with drafting off and on (n-grams of the prompt and answer, plus each prompt's
  `prediction` where it has one), and
- llama-server (bench/setup-llama-server.sh: same llama.cpp, same flags) without speculation
  and with `--spec-type ngram-simple`,
in rounds that alternate the order. Printed for each: tokens/s with vs without drafts (the
ratio), the acceptance rate of drafted tokens, what verifying one drafted token cost as a
fraction of a plain decode step ((time - (tokens - accepted) x step) / drafted, the step
measured without drafts), and how many greedy answers differ from those without drafts; then
infergate with drafts / llama-server with ngram-simple, and the two without, as ratios.

infergate runs either as the gateway (`--bin`, its `[llm.speculation]` switched by a config
file; acceptance is read from `usage.completion_tokens_details` once the OpenAI routes report it)
or in process (`--in-process`: the infergate-llm example speculation_bench, no HTTP, built with
cargo), until the gateway passes `prediction` through.

Both servers run with the same OMP_WAIT_POLICY (--omp-wait-policy; by default libgomp's own:
its threads spin a while at every barrier before they sleep). It moves the figures a lot: on 2
quiet cores one stream ran 101-116 tokens/s by default and 53 passive (every op's barrier a
sleep), while on busy cores passive kept 50-59 where spinning fell to 4-25 (LlmConfig.threads).

Usage: python bench/llm_speculation.py (--bin target/release/infergate | --in-process
         [--example-bin target/release/examples/speculation_bench]) [--llama-server PATH]
         [--threads 2] [--rounds 3] [--max-tokens 256] [--streams 1,8]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm import ROOT, Infergate, LlamaServer  # noqa: E402

PROMPTS = os.path.join(ROOT, "llm", "tests", "data", "speculation_prompts.json")
SLOTS, CONTEXT = 8, 2048


def load_cases():
    with open(PROMPTS) as f:
        return json.load(f)


class Pass:
    def __init__(self, seconds, tokens, accepted, drafted, answers):
        self.seconds, self.tokens, self.accepted, self.drafted, self.answers = (
            seconds, tokens, accepted, drafted, answers)

    def rate(self):
        return self.tokens / self.seconds


def http_pass(server, cases, streams, max_tokens, predict):
    """The prompt set through /v1/chat/completions, `streams` at a time (not streamed)."""
    def one(case):
        body = {"model": server.model, "max_tokens": max_tokens, "temperature": 0,
                "messages": [{"role": "user", "content": case["prompt"]}]}
        if predict and case.get("prediction"):
            body["prediction"] = {"type": "content", "content": case["prediction"]}
        for attempt in range(2):
            try:
                r = client.post(f"{server.url}/v1/chat/completions", json=body,
                                headers=server.headers)
                r.raise_for_status()
                break
            except httpx.RemoteProtocolError:
                # llama-server may close a kept-alive connection without saying so.
                if attempt:
                    raise
        answer = r.json()
        usage = answer.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        timings = answer.get("timings") or {}
        accepted = details.get("accepted_prediction_tokens", timings.get("draft_n_accepted", 0))
        drafted = (details["accepted_prediction_tokens"] + details.get("rejected_prediction_tokens", 0)
                   if "accepted_prediction_tokens" in details else timings.get("draft_n", 0))
        return (usage.get("completion_tokens", 0), accepted or 0, drafted or 0,
                answer["choices"][0]["message"].get("content") or "")

    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    with httpx.Client(timeout=600, limits=limits) as client:
        started = time.perf_counter()
        with ThreadPoolExecutor(streams) as pool:
            results = list(pool.map(one, cases))
        seconds = time.perf_counter() - started
    return Pass(seconds, sum(r[0] for r in results), sum(r[1] for r in results),
                sum(r[2] for r in results), [r[3] for r in results])


def summarise(label, on, off):
    """One line: rate with/without, acceptance, drafted-token cost, differing answers."""
    ratios = sorted(a.rate() / b.rate() for a, b in zip(on, off))
    tokens, accepted, drafted = (sum(p.tokens for p in on), sum(p.accepted for p in on),
                                 sum(p.drafted for p in on))
    seconds, off_seconds, off_tokens = (sum(p.seconds for p in on), sum(p.seconds for p in off),
                                        sum(p.tokens for p in off))
    streams = on[0].streams
    step = off_seconds / off_tokens * streams
    cost = (seconds - (tokens - accepted) / streams * step) / max(drafted, 1) / step
    differ = sorted({i for a, b in zip(on, off) for i, (x, y) in enumerate(zip(a.answers, b.answers))
                     if x != y})
    # The floor: answers that differ between passes without drafts (a sequence decoded alone or
    # beside others takes another attention path; see llm/src/scheduler.rs).
    floor = sorted({i for b in off[1:] for i, (x, y) in enumerate(zip(off[0].answers, b.answers))
                    if x != y})
    print(f"  {label:<44} {statistics.mean(p.rate() for p in on):6.1f} vs "
          f"{statistics.mean(p.rate() for p in off):6.1f} tokens/s = {statistics.median(ratios):.2f}x "
          f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}); acceptance "
          f"{100 * accepted / max(drafted, 1):.0f}% of {drafted // len(on)} drafted; a drafted token "
          f"cost {cost:.2f} of a step; {len(differ)} answers differ {differ} "
          f"(without drafts, between rounds: {floor})", flush=True)
    return statistics.median(ratios)


def in_process(args):
    """One round of infergate-llm's passes from its example, as {(mode, streams): Pass}."""
    cmd = ([args.example_bin] if args.example_bin else
           ["cargo", "run", "--release", "-q", "-p", "infergate-llm", "--example",
            "speculation_bench", "--"])
    cmd += ["--json", "--rounds", "1", "--threads", str(args.threads),
            "--max-tokens", str(args.max_tokens), "--streams", args.streams]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                         env={**os.environ, **({"OMP_WAIT_POLICY": args.omp_wait_policy}
                                                if args.omp_wait_policy else {})}).stdout
    passes = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        p = json.loads(line)
        one = Pass(p["seconds"], p["tokens"], p["accepted"], p["drafted"], p["answers"])
        one.streams = p["streams"]
        passes[(p["mode"], p["streams"])] = one
    return passes


def main():
    p = argparse.ArgumentParser()
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--bin", help="the infergate binary (the gateway)")
    where.add_argument("--in-process", action="store_true",
                       help="infergate-llm's example instead of the gateway")
    p.add_argument("--example-bin", default=None,
                   help="with --in-process: a built speculation_bench example (else cargo builds it)")
    p.add_argument("--llama-server", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--streams", default="1,8")
    p.add_argument("--row-cost", type=float, default=None,
                   help="infergate's [llm.speculation] row_cost (unset: the default)")
    p.add_argument("--omp-wait-policy", default=None,
                   help="OMP_WAIT_POLICY for both servers (unset: libgomp's default)")
    a = p.parse_args()
    cases = load_cases()
    env = {"OMP_WAIT_POLICY": a.omp_wait_policy} if a.omp_wait_policy else {}
    streams_list = [int(s) for s in a.streams.split(",")]
    peer_bin = a.llama_server or subprocess.run(
        ["bash", os.path.join(ROOT, "bench", "setup-llama-server.sh")],
        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"{len(cases)} prompts, greedy, max {a.max_tokens} tokens, {a.threads} threads, "
          f"OMP_WAIT_POLICY={a.omp_wait_policy or os.environ.get('OMP_WAIT_POLICY', '(libgomp default)')}; "
          "provisional on a shared machine", flush=True)

    # Each server, and the passes it runs: (mode, whether requests carry their `prediction`).
    configs = {
        ("llama-server", "off"): (
            lambda: LlamaServer(peer_bin, a.threads, SLOTS, CONTEXT, env=env), [("off", False)]),
        ("llama-server", "ngram-simple"): (
            lambda: LlamaServer(peer_bin, a.threads, SLOTS, CONTEXT,
                                extra=("--spec-type", "ngram-simple"), env=env),
            [("ngram-simple", False)]),
    }
    if a.bin:
        def gateway(on):
            return lambda: Infergate(a.bin, a.threads, SLOTS, CONTEXT, env=env,
                                     config=f"[llm.speculation]\nenabled = {on}\n" + (
                                         f"row_cost = {a.row_cost}\n" if a.row_cost else ""))
        configs[("infergate", "off")] = (gateway("false"), [("no drafts", False)])
        # n-grams alone is llama-server's ngram-simple's like; a prediction is what only the
        # OpenAI API carries.
        configs[("infergate", "on")] = (
            gateway("true"), [("n-grams", False), ("n-grams + prediction", True)])
    if a.in_process:
        configs[("infergate", "in process")] = (None, [])
    passes = {}
    order = list(configs)
    for r in range(a.rounds):
        for key in (order if r % 2 == 0 else list(reversed(order))):
            start, modes = configs[key]
            if start is None:
                for (mode, streams), one in in_process(a).items():
                    passes.setdefault((key[0], mode, streams), []).append(one)
                continue
            server = start()
            try:
                # Untimed: the model loaded, every prompt in the prefix cache.
                http_pass(server, cases, 1, 8, predict=False)
                for streams in streams_list:
                    for mode, predict in modes:
                        one = http_pass(server, cases, streams, a.max_tokens, predict=predict)
                        one.streams = streams
                        passes.setdefault((key[0], mode, streams), []).append(one)
            finally:
                server.stop()
    for streams in streams_list:
        print(f"{streams} stream(s):")
        ours_off = passes[("infergate", "no drafts", streams)]
        ours_on = passes[("infergate", "n-grams + prediction", streams)]
        peer_off = passes[("llama-server", "off", streams)]
        peer_on = passes[("llama-server", "ngram-simple", streams)]
        summarise("infergate, n-grams + prediction", ours_on, ours_off)
        if ("infergate", "n-grams", streams) in passes:
            summarise("infergate, n-grams", passes[("infergate", "n-grams", streams)], ours_off)
        summarise("llama-server, --spec-type ngram-simple", peer_on, peer_off)
        rate = lambda runs: statistics.mean(p.rate() for p in runs)  # noqa: E731
        ngrams = passes.get(("infergate", "n-grams", streams), ours_on)
        print(f"  infergate n-grams / llama-server ngram-simple: {rate(ngrams) / rate(peer_on):.2f}x; "
              f"with predictions: {rate(ours_on) / rate(peer_on):.2f}x; "
              f"without drafts: {rate(ours_off) / rate(peer_off):.2f}x"
              + (" (infergate in process, llama-server over HTTP)" if a.in_process else ""), flush=True)

if __name__ == "__main__":
    sys.exit(main())
