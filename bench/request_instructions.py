#!/usr/bin/env python3
"""Instructions and allocations per inference request, counted exactly under valgrind's callgrind.

This machine's speed moves by more than most per-request changes from one minute to the next, so
CPU-time benchmarks (bench/cpu_per_request.py) need many alternating rounds to show a 5 % change.
Instruction counts do not move with the machine: the server runs under callgrind (with the
plugin host's on-demand memory, as valgrind cannot reserve its pool), collection is switched on
only around N requests of the MLP of bench/cpu_per_request.py ([1,1024] -> [1,1000], batch 1,
KServe v2 binary over TLS, one keep-alive connection per client thread), and the totals are
divided by the server's own success count. ONNX Runtime's share (its library) is printed apart
from the rest (TLS, HTTP, middleware, tensors, the engine's queue), and so is the number of Rust
heap allocations per request. With --compare-bin the other build is measured the same way in the
same run and the ratios printed. With --payload-log FORM the measured server logs every request
and answer of the MLP to a JSON Lines file (mode all, sample 1, tensors as FORM; [payload_log] in
a config file), and the baseline (give the same binary as --compare-bin) does not; with
--trace-ratio R the measured server exports traces over OTLP/HTTP to a collector the script runs,
sampling R, and the baseline exports none.

Usage: bench/request_instructions.py [--bin target/release/infergate] [--compare-bin OLD]
                                     [--requests 400] [--concurrency 1] [--payload-log json|base64]
                                     [--trace-ratio R]
Needs: valgrind (Debian: `apt-get install valgrind`), scripts/setup.sh; a release build.
Slow: about a minute per build for 400 requests (valgrind runs the server ~50x slower).
"""
import argparse
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_per_request  # noqa: E402  (write_mlp, CONFIG, IN)
import serving  # noqa: E402  (BIN)
import workers  # noqa: E402  (free_port)


def run_requests(port, ctx, body, headers, count):
    conn = None
    for _ in range(120):
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=300)
            conn.connect()
            break
        except (OSError, ssl.SSLError):
            time.sleep(1)
    for _ in range(count):
        conn.request("POST", "/v2/models/mlp/infer", body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"inference answered {r.status}: {data[:200]!r}")


def success_count(port, ctx, headers):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=300)
    conn.request("GET", "/v2/models/mlp/stats", headers=headers)
    return json.loads(conn.getresponse().read())["model_stats"][0]["inference_stats"]["success"]["count"]


class Collector:
    """An OTLP/HTTP receiver that accepts every export and counts the bodies: the cost measured
    is the server's, not a collector's."""

    def __init__(self):
        import http.server

        outer = self
        self.exports = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.exports += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"


def measure(binary, requests, concurrency, payload_log=None, trace_ratio=None, collector=None):
    """One build under callgrind: (instructions, ORT's instructions, Rust allocations) per request."""
    data = tempfile.mkdtemp(prefix="infergate-callgrind-")
    extra = []
    env = {k: v for k, v in os.environ.items()
           if k != "INFERGATE_LOG" and not k.startswith(("INFERGATE_OTLP", "INFERGATE_TRACE"))}
    if trace_ratio is not None:
        env["INFERGATE_OTLP_ENDPOINT"] = collector.endpoint
        env["INFERGATE_TRACE_SAMPLE_RATIO"] = str(trace_ratio)
    if payload_log:
        config = os.path.join(data, "payload-log.toml")
        with open(config, "w") as f:
            f.write(f'[payload_log]\ntensor_data = "{payload_log}"\n'
                    f'[payload_log.sinks.bench]\nfile = {{ path = "{data}/payload.jsonl" }}\n')
        extra = ["--config", config]
    model = os.path.join(data, "mlp.onnx")
    cpu_per_request.write_mlp(model)
    subprocess.run([binary, "models", "add", "--data-dir", data, "--name", "mlp",
                    "--config", json.dumps(cpu_per_request.CONFIG), model], check=True, capture_output=True)
    port = workers.free_port()
    out = os.path.join(data, "callgrind.out")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                             binary, "serve", "--listen", f"127.0.0.1:{port}", "--no-grpc", "--data-dir", data,
                             *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            # The server's default log level, as operators run it: each request's
                            # span and its fields are recorded at info.
                            env=env)
    try:
        cert = os.path.join(data, "tls", "cert.pem")
        deadline = time.time() + 300
        while not (os.path.exists(cert) and os.path.exists(os.path.join(data, "admin.key"))):
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("the server did not start under valgrind")
            time.sleep(0.5)
        while True:  # listening, or gone
            if proc.poll() is not None:
                raise RuntimeError(f"{binary} exited under valgrind (builds before 4544a56 cannot reserve "
                                   "the plugin host's memory pool there and stop at start)")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        key = open(os.path.join(data, "admin.key")).read().strip()
        ctx = ssl.create_default_context(cafile=cert)
        row = np.random.default_rng(1).random((1, cpu_per_request.IN), dtype=np.float32).tobytes()
        header = json.dumps({"inputs": [{"name": "input", "shape": [1, cpu_per_request.IN], "datatype": "FP32",
                                         "parameters": {"binary_data_size": len(row)}}],
                             "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream",
                   "Inference-Header-Content-Length": str(len(header))}

        def load(count):
            threads = [threading.Thread(target=run_requests, args=(port, ctx, header + row, headers, count))
                       for _ in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if payload_log:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=300)
            conn.request("PUT", "/api/models/mlp/payload-log", headers={"Authorization": f"Bearer {key}"},
                         body=json.dumps({"mode": "all", "sink": "bench"}))
            answer = conn.getresponse()
            if answer.status != 200:
                raise RuntimeError(f"payload log setting answered {answer.status}: {answer.read()[:200]!r}")
            answer.read()
        load(30)  # load the model, warm every path
        before = success_count(port, ctx, headers)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        load(requests)
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
        done = success_count(port, ctx, headers) - before
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
        dump = out + ".1"
        for _ in range(60):
            if os.path.exists(dump) and os.path.getsize(dump) > 0:
                break
            time.sleep(0.5)
        time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    flat = subprocess.run(["callgrind_annotate", "--inclusive=no", dump], check=True, capture_output=True,
                          text=True).stdout.split("\n")
    total = next(int(line.split()[0].replace(",", "")) for line in flat if "PROGRAM TOTALS" in line)
    ort = sum(int(line.split()[0].replace(",", "")) for line in flat
              if "libonnxruntime" in line and line.strip()[:1].isdigit())
    tree = subprocess.run(["callgrind_annotate", "--tree=caller", "--inclusive=yes", dump], check=True,
                          capture_output=True, text=True).stdout.split("\n")
    allocations = 0
    for i, line in enumerate(tree):
        # The allocator shim every Rust allocation goes through, whichever global allocator
        # is behind it (the system's or mimalloc).
        # (callgrind lists a function once per source file it was attributed to: all count.)
        if "*" in line and re.search(r":__rustc::__rust_alloc \[", line):
            j = i - 1
            while j >= 0 and tree[j].strip() and "*" not in tree[j]:
                m = re.search(r"\(([\d,]+)x\)", tree[j])
                allocations += int(m.group(1).replace(",", "")) if m else 0
                j -= 1
    return total / done, ort / done, allocations / done, done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=serving.BIN)
    ap.add_argument("--compare-bin", help="another build, measured the same way in the same run (the baseline)")
    ap.add_argument("--requests", type=int, default=400, help="per client thread")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--payload-log", choices=("json", "base64"),
                    help="the measured server logs every request and answer to a file, its tensors "
                         "in this form ([payload_log] tensor_data)")
    ap.add_argument("--trace-ratio", type=float,
                    help="the measured server exports traces to a collector this script runs, sampling this "
                         "share of requests (INFERGATE_TRACE_SAMPLE_RATIO); the baseline exports none")
    args = ap.parse_args()
    collector = Collector() if args.trace_ratio is not None else None
    rows = {}
    for label, binary in (("baseline", args.compare_bin), ("measured", args.bin)):
        if binary:
            measured = label == "measured"
            total, ort, allocs, done = measure(binary, args.requests, args.concurrency,
                                               payload_log=args.payload_log if measured else None,
                                               trace_ratio=args.trace_ratio if measured else None,
                                               collector=collector)
            rows[label] = (total, ort, allocs)
            print(f"{label:9s} {binary}: {done} requests; per request {total:,.0f} instructions, ONNX Runtime "
                  f"{ort:,.0f}, the rest {total - ort:,.0f}; Rust heap allocations {allocs:.1f}", flush=True)
    if "baseline" in rows:
        (t0, o0, a0), (t1, o1, a1) = rows["baseline"], rows["measured"]
        print(f"ratio measured / baseline: instructions outside ONNX Runtime {(t1 - o1) / (t0 - o0):.3f}, "
              f"allocations {a1 / a0:.3f}, all instructions {t1 / t0:.3f}")
        # ONNX Runtime's own count moves by several thousand between runs of one build: the
        # part outside it, added, against the whole request is the steadier figure.
        print(f"added outside ONNX Runtime, of the baseline's whole request: "
              f"{((t1 - o1) - (t0 - o0)) / t0 * 100:+.2f} %")
    if collector:
        print(f"the collector received {collector.exports} exports")


if __name__ == "__main__":
    main()
