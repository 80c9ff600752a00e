#!/usr/bin/env python3
"""Dynamic batching through the server, measured with perf_analyzer: the ImageNet classifier
(EfficientNet-Lite0, CPU) registered twice on one server, without batching and with
`max_batch_size` 16 + `max_queue_delay_microseconds` 2000 (Triton's knobs), each at concurrency
1, 8 and 32 over KServe v2 HTTP with binary tensors, TLS. Prints a markdown table and the issue's
two ratios from this one run: throughput on/off at concurrency 32 (target >= 2x) and p99 on at
concurrency 1 / p99 off at concurrency 1 (target < 2x).

Usage: bench/batching.py [--seconds 4] [--instances 1] [--intra-threads 2]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, `cargo build --release -p infergate`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402  (start_server, perf_analyzer, paths)

BATCHED = {"max_batch_size": 16, "dynamic_batching": {"max_queue_delay_microseconds": 2000}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--intra-threads", type=int, default=2)
    args = ap.parse_args()
    pa = subprocess.run(["bash", os.path.join(serving.ROOT, "bench", "setup-perf-analyzer.sh")],
                        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    data = tempfile.mkdtemp(prefix="infergate-batching-")
    model = os.path.join(serving.MODELS, "efficientnet-lite0.onnx")
    for name, config in (("effnet", {}), ("effnet-batched", BATCHED)):
        subprocess.run([serving.BIN, "models", "add", "--data-dir", data, "--name", name,
                        "--config", json.dumps(config), model], check=True, capture_output=True)
    proc, addrs = serving.start_server(data, intra_threads=args.intra_threads, instances=args.instances)
    try:
        key = open(os.path.join(data, "admin.key")).read().strip()
        cert = os.path.join(data, "tls", "cert.pem")
        image = np.random.default_rng(0).random((3, 224, 224), dtype=np.float32).flatten().tolist()
        # Triton's convention: with max_batch_size > 0 the configured shape leaves out the batch
        # dimension (perf_analyzer's batch size 1 adds it); without batching it is the full shape.
        inputs = {}
        for name, shape in (("effnet", [1, 3, 224, 224]), ("effnet-batched", [3, 224, 224])):
            path = os.path.join(data, f"{name}.json")
            with open(path, "w") as f:
                json.dump({"data": [{"input": {"content": image, "shape": shape}}]}, f)
            inputs[name] = (path, [f"input:{','.join(map(str, shape))}"])
        print(f"efficientnet-lite0, CPU, {args.instances} instance(s), intra-op threads {args.intra_threads}; "
              f"on = max_batch_size 16, max_queue_delay 2 ms; perf_analyzer, HTTP, {args.seconds:g} s windows\n")
        print("| concurrency | off infer/s | on infer/s | on/off | off p50 / p99 ms | on p50 / p99 ms |")
        print("| --- | --- | --- | --- | --- | --- |")
        results = {}
        for c in (1, 8, 32):
            row = {}
            for label, name in (("off", "effnet"), ("on", "effnet-batched")):
                data_file, shapes = inputs[name]
                row[label] = serving.perf_analyzer(pa, "http", addrs["http"], cert, key, name, data_file,
                                                   shapes, c, args.seconds)
            results[c] = row
            (t0, p50_0, p99_0), (t1, p50_1, p99_1) = row["off"], row["on"]
            print(f"| {c} | {t0:.1f} | {t1:.1f} | {t1 / t0:.2f} | {p50_0 / 1e3:.1f} / {p99_0 / 1e3:.1f} | "
                  f"{p50_1 / 1e3:.1f} / {p99_1 / 1e3:.1f} |", flush=True)
        speedup = results[32]["on"][0] / results[32]["off"][0]
        p99 = results[1]["on"][2] / results[1]["off"][2]
        print(f"\nthroughput at concurrency 32, on/off: {speedup:.2f}x (target >= 2x)")
        print(f"p99 at concurrency 1, on/off: {p99:.2f}x (target < 2x)")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
