#!/usr/bin/env python3
"""System shared memory against tensors in the request: perf_analyzer with `--shared-memory
system` and without, on a model with a 1 MiB input and a 1 MiB output (FP32 [1, 262144],
y = x + x), at concurrency 1 and 8, over HTTP and gRPC; for infergate and, beside it in the
same run, Triton 2.51 from the peers setup doing the same. Prints, per server, protocol and
concurrency: throughput without and with shared memory, their ratio (the goal: >= 1.5 on
tensors this large), and the server's CPU per inference (its whole process tree, from
/proc, over the inferences its statistics counted).

Both servers listen on plain HTTP/gRPC on 127.0.0.1 (the peers run Triton so), one instance,
one intra-op thread; infergate serves the benchmark's calls without a key (anonymous access on
loopback), as Triton does.

Usage: bench/shared_memory.py [--seconds 3] [--protocols http,grpc] [--concurrency 1,8]
                              [--peers /work/shared/peers] [--no-triton]
Needs: scripts/setup.sh, `cargo build --release -p infergate`, and for Triton the peers setup
(`PEERS_WORK=DIR /work/shared/peers/setup.sh`, PEERS_WORK set when running this).
"""
import argparse
import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import BIN, ROOT, start_server  # noqa: E402

ELEMENTS = 262144  # 1 MiB of FP32
MODEL = "big"
TICK = os.sysconf("SC_CLK_TCK")

TRITON_CONFIG = """name: "big"
backend: "python"
max_batch_size: 0
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1, {n} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 1, {n} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "onnx_path" value: {{ string_value: "{path}" }} }}
parameters {{ key: "ort_threads" value: {{ string_value: "1" }} }}
"""


def tree_cpu_seconds(pid):
    """CPU seconds (user + system) of `pid` and its descendants, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except OSError:
                pass
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        except OSError:
            pass
        todo.extend(children.get(p, []))
    return total


def inference_count(http_addr):
    with urllib.request.urlopen(f"http://{http_addr}/v2/models/{MODEL}/stats") as r:
        return int(json.load(r)["model_stats"][0]["inference_count"])


def measure(pa, pid, http_addr, addr, protocol, concurrency, shared, seconds):
    """(inferences/s, server CPU µs per inference) of one perf_analyzer measurement, or (None,
    why) when perf_analyzer failed or stalled."""
    out = tempfile.mktemp(suffix=".csv")
    cmd = shlex.split(pa) + ["-m", MODEL, "-u", addr, "-i", protocol, "--shape", f"x:1,{ELEMENTS}",
                             "--concurrency-range", f"{concurrency}:{concurrency}",
                             "--measurement-interval", str(int(seconds * 1000)),
                             "--stability-percentage", "60", "--max-trials", "8", "-f", out]
    if shared:
        cmd += ["--shared-memory", "system", "--output-shared-memory-size", str(ELEMENTS * 4)]
    count, cpu = inference_count(http_addr), tree_cpu_seconds(pid)
    try:
        # Bounded: perf_analyzer's trials take at most max-trials windows.
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * seconds + 60)
    except subprocess.TimeoutExpired:
        return None, "perf_analyzer did not finish"
    cpu, count = tree_cpu_seconds(pid) - cpu, inference_count(http_addr) - count
    if r.returncode != 0:
        lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
        return None, f"perf_analyzer exit {r.returncode}: {lines[-1] if lines else ''}"
    with open(out) as f:
        row = next(csv.DictReader(f))
    os.unlink(out)
    return float(row["Inferences/Second"]), cpu / max(count, 1) * 1e6


def model_file(directory):
    path = os.path.join(directory, "double.onnx")
    python = os.environ.get("INFERGATE_PYTHON", sys.executable)
    subprocess.run([python, os.path.join(ROOT, "scripts", "test_models.py"), "double", path], check=True)
    return path


def start_infergate(model):
    data = tempfile.mkdtemp(prefix="infergate-bench-shm-")
    subprocess.run([BIN, "models", "add", "--data-dir", data, "--name", MODEL, model], check=True,
                   capture_output=True)
    proc, addrs = start_server(data, intra_threads=1, instances=1,
                               extra_args=("--insecure-http", "--anonymous-scopes", "infer"))
    http_addr = addrs["http"].removeprefix("http://")
    grpc_addr = addrs["grpc"].removeprefix("http://")
    return proc, http_addr, grpc_addr, data


def start_triton(peers, work, model):
    repo = os.path.join(work, "triton_repo", MODEL)
    os.makedirs(os.path.join(repo, "1"), exist_ok=True)
    shutil.copy(os.path.join(peers, "triton_ort_model.py"), os.path.join(repo, "1", "model.py"))
    with open(os.path.join(repo, "config.pbtxt"), "w") as f:
        f.write(TRITON_CONFIG.format(n=ELEMENTS, path=model))
    port = 8600
    env = dict(os.environ, PEERS_WORK=work)
    subprocess.run([os.path.join(peers, "triton_peer.sh"), "start", str(port)], check=True, env=env)
    pid = int(open(os.path.join(work, "run", f"triton_{port}.pid")).read())
    return pid, f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}", port


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--peers", default="/work/shared/peers")
    ap.add_argument("--no-triton", action="store_true")
    args = ap.parse_args()
    work = os.environ.get("PEERS_WORK")
    with_triton = not args.no_triton and work is not None
    pa = os.path.join(args.peers, "pa.sh") if work else None
    if pa is None:
        pa = subprocess.run(["bash", os.path.join(ROOT, "bench", "setup-perf-analyzer.sh")],
                            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    models = tempfile.mkdtemp(prefix="infergate-bench-shm-models-")
    model = model_file(models)
    servers = []
    proc, http_addr, grpc_addr, data = start_infergate(model)
    servers.append(("infergate", proc.pid, http_addr, grpc_addr))
    triton_port = None
    try:
        if with_triton:
            pid, t_http, t_grpc, triton_port = start_triton(args.peers, work, model)
            servers.append(("triton 2.51", pid, t_http, t_grpc))
        print(f"{ELEMENTS * 4} B input and output, {time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.1f}")
        print("| server | protocol | concurrency | inf/s without | inf/s with shared memory | ratio "
              "| server CPU µs/inf without | with shared memory |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, pid, h, g in servers:
            for protocol in args.protocols.split(","):
                addr = h if protocol == "http" else g
                for c in map(int, args.concurrency.split(",")):
                    plain, plain_cpu = measure(pa, pid, h, addr, protocol, c, False, args.seconds)
                    shared, shared_cpu = measure(pa, pid, h, addr, protocol, c, True, args.seconds)
                    if plain is None or shared is None:
                        why = plain_cpu if plain is None else shared_cpu
                        print(f"| {name} | {protocol} | {c} | failed: {why} | | | | |", flush=True)
                        continue
                    print(f"| {name} | {protocol} | {c} | {plain:.1f} | {shared:.1f} | {shared / plain:.2f} "
                          f"| {plain_cpu:.0f} | {shared_cpu:.0f} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
        if triton_port is not None:
            env = dict(os.environ, PEERS_WORK=work)
            subprocess.run([os.path.join(args.peers, "triton_peer.sh"), "stop", str(triton_port)], env=env)
        shutil.rmtree(models, ignore_errors=True)


if __name__ == "__main__":
    main()
