#!/usr/bin/env python3
"""Pipeline overhead: the p50 latency a pipeline with two pass-through WebAssembly plugins adds
to a model's, measured in one run. Both are called through KServe v2 JSON over TLS on one
keep-alive connection, one request at a time, alternating model and pipeline so load drifts
hit both equally. Target: the pipeline adds at most 5% to the model's p50.

Usage: bench/pipeline_overhead.py [--requests 300] [--model minilm]
Needs: scripts/setup.sh (models, plugins/dist) and `cargo build --release -p infergate`
(or INFERGATE_BIN pointing at another build).
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "release", "infergate"))
MODELS = os.environ.get("INFERGATE_MODELS", os.path.join(ROOT, ".cache", "models"))
PLUGINS = os.environ.get("INFERGATE_PLUGINS", os.path.join(ROOT, "plugins", "dist"))
SEQ = 32
BODY = {"inputs": [
    {"name": "input_ids", "shape": [1, SEQ], "datatype": "INT64", "data": [101] + [2000 + i for i in range(SEQ - 2)] + [102]},
    {"name": "attention_mask", "shape": [1, SEQ], "datatype": "INT64", "data": [1] * SEQ},
    {"name": "token_type_ids", "shape": [1, SEQ], "datatype": "INT64", "data": [0] * SEQ},
]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--model", default="minilm")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="infergate-bench-")
    subprocess.run([BIN, "models", "add", "--data-dir", data, "--name", args.model,
                    os.path.join(MODELS, f"{args.model}.onnx")], check=True, capture_output=True)
    subprocess.run([BIN, "plugins", "add", "--data-dir", data, os.path.join(PLUGINS, "passthrough.wasm")],
                   check=True, capture_output=True)
    subprocess.run([BIN, "pipelines", "put", "--data-dir", data, "two-passthrough",
                    f'{{"pre": ["passthrough", "passthrough"], "model": "{args.model}"}}'],
                   check=True, capture_output=True)
    proc = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--no-grpc", "--data-dir", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            m = re.search(r"listening on (https://\S+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
            if m:
                url = m.group(1)
                break
        key = open(os.path.join(data, "admin.key")).read().strip()
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {key}"
        cert = os.path.join(data, "tls", "cert.pem")

        def call(name):
            t = time.perf_counter()
            r = s.post(f"{url}/v2/models/{name}/infer", json=BODY, verify=cert, timeout=30)
            elapsed = time.perf_counter() - t
            r.raise_for_status()
            return elapsed

        for name in (args.model, "two-passthrough"):  # warm up: load, compile, connect
            for _ in range(10):
                call(name)
        model, pipeline = [], []
        for _ in range(args.requests):
            model.append(call(args.model))
            pipeline.append(call("two-passthrough"))
        p50m, p50p = statistics.median(model) * 1e6, statistics.median(pipeline) * 1e6
        print("| path | p50 µs | p99 µs |")
        print("| --- | --- | --- |")
        for label, xs in ((f"model `{args.model}`", model), ("pipeline: 2 pass-through plugins → model", pipeline)):
            xs = sorted(xs)
            print(f"| {label} | {statistics.median(xs) * 1e6:.0f} | {xs[int(len(xs) * 0.99) - 1] * 1e6:.0f} |")
        print(f"\npipeline / model p50 = {p50p / p50m:.3f} (added {p50p - p50m:+.0f} µs; target ≤ 1.05)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
