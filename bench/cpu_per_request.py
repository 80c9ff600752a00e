#!/usr/bin/env python3
"""Server CPU per inference: a small MLP ([N,1024] -> [N,1000], one dense layer, written with
numpy + onnx) served with dynamic batching (max_batch_size 16, max_queue_delay 500 us), driven by
perf_analyzer at concurrency 8 over KServe v2 HTTP with binary tensors (TLS).

The server's CPU time is its whole process's (every thread: /proc/PID/stat utime + stime) over
the perf_analyzer run; the inferences are the server's own success count over the same run
(/v2/models/mlp/stats). Next to it: the CPU time ONNX Runtime itself needs for the same batches,
run in this process (the server's batch-size histogram replayed on one session with the server's
intra-op thread count), so the difference is what serving costs beyond the model.

Usage: bench/cpu_per_request.py [--seconds 5] [--concurrency 8] [--repeat 1] [-- SERVER ARGS...]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, `cargo build --release -p infergate`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402  (start_server, perf_analyzer, paths)

IN, OUT = 1024, 1000
CONFIG = {"max_batch_size": 16, "dynamic_batching": {"max_queue_delay_microseconds": 500}}
TICK = os.sysconf("SC_CLK_TCK")


def write_mlp(path):
    """[N,1024] -> MatMul + bias -> [N,1000], fixed-seed weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((IN, OUT)) / 32).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(OUT).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["output"])],
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", IN])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", OUT])],
        initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def cpu_split(pid):
    """(utime, stime) of the whole process (all its threads), in seconds: stime is the kernel's
    work for it (socket reads and writes, loopback TCP, futex waits and wake-ups)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def stats(client, url, key):
    out = subprocess.run(["curl", "-sf", "--cacert", client, "-H", f"Authorization: Bearer {key}", url],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["model_stats"][0]


def batch_histogram(before, after):
    """{batch size: executions} over the run."""
    seen = {b["batch_size"]: b["compute_infer"]["count"] for b in before.get("batch_stats", [])}
    return {b["batch_size"]: b["compute_infer"]["count"] - seen.get(b["batch_size"], 0)
            for b in after.get("batch_stats", []) if b["compute_infer"]["count"] > seen.get(b["batch_size"], 0)}


def ort_cpu_per_inference(model, histogram, intra_threads):
    """Process CPU seconds per inference that ORT needs for these batches, in this process."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    feeds = {n: np.random.default_rng(n).random((n, IN), dtype=np.float32) for n in histogram}
    for n in histogram:
        for _ in range(20):
            sess.run(None, {"input": feeds[n]})
    start = time.process_time()
    inferences = 0
    for n, count in histogram.items():
        for _ in range(count):
            sess.run(None, {"input": feeds[n]})
        inferences += n * count
    return (time.process_time() - start) / inferences


def measure(pa, data, model, seconds, concurrency, server_args):
    """One server, one perf_analyzer run: (server µs/inference, ORT µs/inference, histogram)."""
    proc, addrs = serving.start_server(data, extra_args=server_args)
    try:
        key = open(os.path.join(data, "admin.key")).read().strip()
        cert = os.path.join(data, "tls", "cert.pem")
        url = serving.url(addrs["http"], "/v2/models/mlp/stats")
        data_file = os.path.join(data, "mlp-input.json")
        row = np.random.default_rng(1).random(IN, dtype=np.float32)
        with open(data_file, "w") as f:
            json.dump({"data": [{"input": {"content": row.tolist(), "shape": [IN]}}]}, f)
        # Load and warm the model before counting.
        serving.perf_analyzer(pa, "http", addrs["http"], cert, key, "mlp", data_file, [f"input:{IN}"],
                              concurrency, 1.0)
        before, (user0, kernel0) = stats(cert, url, key), cpu_split(proc.pid)
        serving.perf_analyzer(pa, "http", addrs["http"], cert, key, "mlp", data_file, [f"input:{IN}"],
                              concurrency, seconds)
        (user1, kernel1), after = cpu_split(proc.pid), stats(cert, url, key)
        done = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
        histogram = batch_histogram(before, after)
        intra = server_intra_threads(proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    server_us = (user1 - user0 + kernel1 - kernel0) / done * 1e6
    kernel_us = (kernel1 - kernel0) / done * 1e6
    ort_us = ort_cpu_per_inference(model, histogram, intra) * 1e6
    return server_us, ort_us, done, histogram, intra, kernel_us


def server_intra_threads(proc):
    """The intra-op threads the server gave the model (its 'model loaded' log line)."""
    for line in proc.log_lines:
        if "model loaded" in line and "intra_threads=" in line:
            return int(line.split("intra_threads=")[1].split()[0])
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--plain-http", action="store_true",
                    help="serve without TLS (`--insecure-http`), as the issue's Triton figure was measured")
    ap.add_argument("server_args", nargs="*", help="extra `infergate serve` flags, after --")
    args = ap.parse_args()
    if args.plain_http:
        args.server_args = ["--insecure-http", *args.server_args]
    pa = serving.perf_analyzer_command()
    data = tempfile.mkdtemp(prefix="infergate-cpu-")
    model = os.path.join(data, "mlp.onnx")
    write_mlp(model)
    subprocess.run([serving.BIN, "models", "add", "--data-dir", data, "--name", "mlp",
                    "--config", json.dumps(CONFIG), model], check=True, capture_output=True)
    print(f"MLP [N,{IN}]->[N,{OUT}], max_batch_size 16, max_queue_delay 500 us, perf_analyzer "
          f"concurrency {args.concurrency}, HTTP{'' if args.plain_http else ' over TLS'} binary, {args.seconds:g} s; server flags: "
          f"{' '.join(args.server_args) or '(defaults)'}; load average {os.getloadavg()[0]:.2f}\n")
    print("| run | inferences | server CPU µs/inference | of which kernel µs | ORT in-process CPU µs/inference | "
          "ratio | serving beyond the model µs | batches (size x count) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in range(1, args.repeat + 1):
        server_us, ort_us, done, histogram, intra, kernel_us = measure(pa, data, model, args.seconds, args.concurrency,
                                                            args.server_args)
        batches = " ".join(f"{b}x{c}" for b, c in sorted(histogram.items(), key=lambda kv: -kv[1])[:4])
        print(f"| {run} | {done} | {server_us:.1f} | {kernel_us:.1f} | {ort_us:.1f} (intra {intra}) | {server_us / ort_us:.2f} | "
              f"{server_us - ort_us:.1f} | {batches} |", flush=True)


if __name__ == "__main__":
    main()
