#!/usr/bin/env python3
"""Serving overhead: perf_analyzer through infergate (TLS; KServe v2 over HTTP with binary tensors,
and over gRPC with raw tensors) at concurrency 1, 4, 8 versus the same model run in-process by
ONNX Runtime's Python API with the same thread settings (intra-op threads 1, one session,
batch 1), measured in the same run. Prints a markdown table with the throughput ratio
infergate/in-process and the added p50 latency.

Usage: bench/serving.py [--seconds 3] [--models minilm,ocr-rec] [--protocols http,grpc]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, `cargo build --release -p infergate`.
"""
import argparse
import csv
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import queue

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "release", "infergate"))
MODELS = os.environ.get("INFERGATE_MODELS", os.path.join(ROOT, ".cache", "models"))

# name -> (file, {input: (shape, dtype, generator)})
SEQ = 32
SPECS = {
    "minilm": ("minilm.onnx", {
        "input_ids": ([1, SEQ], "INT64", lambda r: r.integers(1000, 20000, (1, SEQ))),
        "attention_mask": ([1, SEQ], "INT64", lambda r: np.ones((1, SEQ), np.int64)),
        "token_type_ids": ([1, SEQ], "INT64", lambda r: np.zeros((1, SEQ), np.int64)),
    }),
    "ocr-rec": ("ocr-rec.onnx", {
        "x": ([1, 3, 48, 320], "FP32", lambda r: r.random((1, 3, 48, 320), dtype=np.float32)),
    }),
}
NP = {"INT64": np.int64, "FP32": np.float32}


def start_server(data, intra_threads=None, instances=None, extra_args=()):
    """Starts infergate; returns the process (its log lines, ANSI-stripped, collect in
    `proc.log_lines`) and its HTTP and gRPC addresses (host:port). Threads and instances left
    None are the server's defaults (sized from the cores)."""
    cmd = [BIN, "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--data-dir", data]
    if intra_threads is not None:
        cmd += ["--intra-threads", str(intra_threads)]
    if instances is not None:
        cmd += ["--instances", str(instances)]
    proc = subprocess.Popen(cmd + list(extra_args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc.log_lines = []
    lines = queue.Queue()

    def read():
        for line in proc.stderr:
            line = re.sub(r"\x1b\[[0-9;]*m", "", line)
            proc.log_lines.append(line)
            lines.put(line)
    threading.Thread(target=read, daemon=True).start()
    addrs = {}
    while len(addrs) < 2:
        m = re.search(r"(grpc )?listening on (https?)://(\S+)", lines.get(timeout=60))
        if m:
            # A server without TLS (`--insecure-http`) keeps its scheme in the address, so that
            # callers (perf_analyzer_row, URLs) know to leave TLS out.
            addr = m.group(3) if m.group(2) == "https" else f"http://{m.group(3)}"
            addrs["grpc" if m.group(1) else "http"] = addr
    return proc, addrs


def url(addr, path):
    """`path` on the server at `addr` (as start_server gives it)."""
    return f"{addr}{path}" if addr.startswith("http://") else f"https://{addr}{path}"


def perf_analyzer_command():
    """The command prefix that runs perf_analyzer (installed by bench/setup-perf-analyzer.sh)."""
    return subprocess.run(["bash", os.path.join(ROOT, "bench", "setup-perf-analyzer.sh")],
                          check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]


def in_process(file, feeds, seconds):
    """(inferences/s, p50 µs, p99 µs) of one session (1 intra-op thread) run back to back;
    `file` is a name in MODELS or an absolute path (os.path.join keeps that as it is)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(MODELS, file), opts, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, feeds)
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        sess.run(None, feeds)
        lat.append(time.perf_counter() - t)
    lat = np.array(lat) * 1e6
    return len(lat) / lat.sum() * 1e6, np.percentile(lat, 50), np.percentile(lat, 99)


def perf_analyzer(pa, protocol, addr, cert, key, model, data_file, shapes, concurrency, seconds, extra=()):
    """(inferences/s, p50 µs, p99 µs) of one perf_analyzer measurement."""
    row = perf_analyzer_row(pa, protocol, addr, cert, key, model, data_file, shapes, concurrency, seconds, extra)
    return float(row["Inferences/Second"]), float(row["p50 latency"]), float(row["p99 latency"])


def perf_analyzer_row(pa, protocol, addr, cert, key, model, data_file, shapes, concurrency, seconds, extra=()):
    """perf_analyzer's whole CSV row (its client-side send/receive times included); `extra`:
    more perf_analyzer arguments."""
    out = tempfile.mktemp(suffix=".csv")
    if protocol == "grpc":
        # -H reaches gRPC calls as metadata, whose keys are lower-case.
        target = ["-i", "grpc", "-u", addr, "--ssl-grpc-use-ssl",
                  "--ssl-grpc-root-certifications-file", cert, "-H", f"authorization: Bearer {key}"]
    elif addr.startswith("http://"):
        target = ["-u", addr.removeprefix("http://"), "-H", f"Authorization: Bearer {key}"]
    else:
        target = ["-u", f"https://{addr}", "--ssl-https-ca-certificates-file", cert,
                  "-H", f"Authorization: Bearer {key}"]
    cmd = shlex.split(pa) + ["-m", model, *target, "--input-data", data_file,
        "--concurrency-range", f"{concurrency}:{concurrency}",
        "--measurement-interval", str(int(seconds * 1000)), "--stability-percentage", "60",
        "--max-trials", "12", "-f", out, *extra]
    for s in shapes:
        cmd += ["--shape", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"perf_analyzer failed:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    with open(out) as f:
        row = next(csv.DictReader(f))
    os.unlink(out)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--models", default="minilm,ocr-rec")
    ap.add_argument("--protocols", default="http,grpc")
    args = ap.parse_args()
    pa = subprocess.run(["bash", os.path.join(ROOT, "bench", "setup-perf-analyzer.sh")],
                        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    data = tempfile.mkdtemp(prefix="infergate-bench-")
    names = args.models.split(",")
    for name in names:
        subprocess.run([BIN, "models", "add", "--data-dir", data, "--name", name,
                        os.path.join(MODELS, SPECS[name][0])], check=True, capture_output=True)
    proc, addrs = start_server(data, intra_threads=1, instances=1)
    try:
        key = open(os.path.join(data, "admin.key")).read().strip()
        cert = os.path.join(data, "tls", "cert.pem")
        rng = np.random.default_rng(0)
        print(f"| model | protocol | concurrency | infergate inf/s | in-process inf/s | ratio | infergate p50 µs | in-process p50 µs | added p50 µs | infergate p99 µs |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in names:
            file, inputs = SPECS[name]
            feeds = {k: g(rng).astype(NP[dt]) for k, (shape, dt, g) in inputs.items()}
            data_file = tempfile.mktemp(suffix=".json")
            with open(data_file, "w") as f:
                json.dump({"data": [{k: {"content": v.flatten().tolist(), "shape": list(v.shape)} for k, v in feeds.items()}]}, f)
            shapes = [f"{k}:{','.join(map(str, s))}" for k, (s, _, _) in inputs.items()]
            base_tput, base_p50, base_p99 = in_process(file, feeds, args.seconds)
            for protocol in args.protocols.split(","):
                for c in (1, 4, 8):
                    tput, p50, p99 = perf_analyzer(pa, protocol, addrs[protocol], cert, key, name, data_file,
                                                   shapes, c, args.seconds)
                    print(f"| {name} | {protocol} | {c} | {tput:.1f} | {base_tput:.1f} | {tput / base_tput:.3f} | {p50:.0f} | {base_p50:.0f} | {p50 - base_p50:+.0f} | {p99:.0f} |", flush=True)
            os.unlink(data_file)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
