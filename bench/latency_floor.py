#!/usr/bin/env python3
"""The floor under the third serving target (MiniLM's added p50 at concurrency 1 <= 150 µs over
ONNX Runtime in process): what a lone request costs around a ~10 ms model run on this machine,
with nothing of infergate's in the way. Three sides, measured alternating in each round:

1. infergate, MiniLM (32 tokens, 1 instance, 1 intra-op thread) under perf_analyzer at
   concurrency 1 over HTTP/TLS with binary tensors: added p50 = p50 - in-process p50 -
   perf_analyzer's own client send + receive (as bench/cpu_per_request_targets.py's target 3);
   beside it the server's own mean time for the model run, and the added p50 over that run
   instead of the in-process p50 (the model's drift between the two taken out);
2. bench/floor/floor_server.rs (tokio + hyper 1 + tokio-rustls: infergate's stack and
   nothing else), same client and accounting, answering infergate's own MiniLM answer from
   memory after spinning on the request's thread for the in-process p50 (one core busy, as a
   model run keeps it): added p50 = p50 - spin - client;
3. the machine alone: bench/floor/ping_pong.rs, a plain loopback TCP round trip of the same
   sizes as the request's and its answer's bodies (no TLS, no HTTP, no parsing), the answering
   thread spinning for the same time first, against the same round trips back to back. The first
   is a floor no server on this machine can go under; the difference is what a request pays for
   the ~10 ms its asking thread slept and its core idled (waking it), which back-to-back runs in
   process never pay. The same after the spin with 64 bytes each way: the floor with nothing to
   copy, whatever part of the reading perf_analyzer's client time accounts for.

Usage: bench/latency_floor.py [--seconds 4] [--rounds 3]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, `cargo build --release -p infergate --bin
infergate --example floor_server --example ping_pong`.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_floor  # noqa: E402  (canned answers, the floor server)
import serving  # noqa: E402  (start_server, perf_analyzer, in_process)


def minilm_inputs():
    """MiniLM's feeds (serving.SPECS, fixed seed), perf_analyzer's input file content and shapes."""
    _, inputs = serving.SPECS["minilm"]
    rng = np.random.default_rng(0)
    feeds = {k: g(rng).astype(serving.NP[dt]) for k, (shape, dt, g) in inputs.items()}
    content = {"data": [{k: {"content": v.flatten().tolist(), "shape": list(v.shape)} for k, v in feeds.items()}]}
    shapes = [f"{k}:{','.join(map(str, s))}" for k, (s, _, _) in inputs.items()]
    return feeds, content, shapes


KSERVE_TYPES = {np.dtype(np.int64): "INT64", np.dtype(np.float32): "FP32"}


def kserve_request(feeds):
    """The same inference as a KServe v2 binary request, every output asked for in binary (as
    perf_analyzer asks): (JSON head, binary part)."""
    parts, meta = [], []
    for name, value in feeds.items():
        raw = np.ascontiguousarray(value).tobytes()
        meta.append({"name": name, "shape": list(value.shape), "datatype": KSERVE_TYPES[value.dtype],
                     "parameters": {"binary_data_size": len(raw)}})
        parts.append(raw)
    head = json.dumps({"inputs": meta, "parameters": {"binary_data_output": True}}).encode()
    return head, b"".join(parts)


def body_sizes(request, answers):
    """The bytes of `request`'s body (JSON head + binary part) and of the canned inference answer's:
    HTTP's headers left out, so a round trip of these sizes stays a floor."""
    head, binary = request
    return len(head) + len(binary), os.path.getsize(answers["/v2/models/minilm/infer"][0])


def added(row, subtract):
    """perf_analyzer's p50 less `subtract` and its own client send + receive, in µs."""
    client = float(row["Client Send"]) + float(row["Client Recv"])
    return float(row["p50 latency"]) - subtract - client, client


def floor_added(pa, binary, data, answers, workdir, spin_us, data_file, shapes, seconds):
    """The floor server (`binary`) answering `answers` after spinning `spin_us` per inference, under
    perf_analyzer at concurrency 1: its added p50 in µs (p50 - spin - client send + receive)."""
    cert = os.path.join(data, "tls", "cert.pem")
    key = open(os.path.join(data, "admin.key")).read().strip()
    floor = http_floor.HyperFloor(binary, data, answers, workdir, busy_us=spin_us)
    try:
        # The version named: the floor server's statistics are frozen.
        row = serving.perf_analyzer_row(pa, "http", floor.addr, cert, key, "minilm", data_file, shapes, 1,
                                        seconds, ["-x", "1"])
    finally:
        floor.stop()
    return added(row, spin_us)[0]


def round_trip(binary, spin_us, seconds, sizes):
    """bench/floor/ping_pong.rs (`binary`): the added p50 in µs of a plain loopback TCP round
    trip of `sizes` (request bytes, answer bytes) whose answering thread spins `spin_us` first."""
    out = subprocess.run([binary, str(int(spin_us)), str(seconds), *map(str, sizes)], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[out.index("added_p50_us") + 1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    examples = os.path.join(serving.ROOT, "target", "release", "examples")
    ap.add_argument("--floor-server", default=os.path.join(examples, "floor_server"),
                    help="bench/floor/floor_server.rs, built")
    ap.add_argument("--ping-pong", default=os.path.join(examples, "ping_pong"),
                    help="bench/floor/ping_pong.rs, built")
    args = ap.parse_args()
    for binary in (args.floor_server, args.ping_pong):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is not built: cargo build --release -p infergate --example floor_server "
                     "--example ping_pong")
    pa = serving.perf_analyzer_command()
    data = tempfile.mkdtemp(prefix="infergate-latency-floor-")
    workdir = os.path.join(data, "floor")
    os.makedirs(workdir)
    file, _ = serving.SPECS["minilm"]
    subprocess.run([serving.BIN, "models", "add", "--data-dir", data, "--name", "minilm",
                    os.path.join(serving.MODELS, file)], check=True, capture_output=True)
    feeds, content, shapes = minilm_inputs()
    data_file = os.path.join(data, "input.json")
    with open(data_file, "w") as f:
        json.dump(content, f)
    request = kserve_request(feeds)
    answers = http_floor.canned_answers(data, workdir, "minilm", request)
    sizes = body_sizes(request, answers)
    key = open(os.path.join(data, "admin.key")).read().strip()
    cert = os.path.join(data, "tls", "cert.pem")
    print(f"MiniLM ({serving.SEQ} tokens), concurrency 1, perf_analyzer over HTTP/1.1 + TLS with binary "
          f"tensors, {args.seconds:g} s windows; round trips of {sizes[0]} + {sizes[1]} bytes; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n")
    print("| round | ORT in process p50 µs | infergate: added p50 µs (target 3) | infergate: its model run, "
          "mean µs | infergate: added p50 over its own model run µs | floor server, spinning the in-process "
          "p50: added p50 µs | loopback round trip, back to back µs | same after spinning the in-process p50 "
          "(the machine's floor) µs | idle-wake cost (difference) µs | same floor with 64 bytes each way µs |")
    print("| --- " * 10 + "|")
    for r in range(1, args.rounds + 1):
        _, base, _ = serving.in_process(file, feeds, args.seconds)
        sides = ["infergate", "floor", "ping"]
        figures = {}
        # Each round starts one side later, so a machine that slows down mid-round weighs on all.
        for side in sides[r % 3:] + sides[:r % 3]:
            if side == "infergate":
                proc, addrs = serving.start_server(data, intra_threads=1, instances=1)
                try:
                    row = serving.perf_analyzer_row(pa, "http", addrs["http"], cert, key, "minilm", data_file,
                                                    shapes, 1, args.seconds)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                model_run = float(row["Server Compute Infer"])
                figures[side] = (added(row, base)[0], added(row, model_run)[0], model_run)
            elif side == "floor":
                figures[side] = floor_added(pa, args.floor_server, data, answers, workdir, base, data_file,
                                            shapes, args.seconds)
            else:
                figures[side] = (round_trip(args.ping_pong, 0, args.seconds / 2, sizes),
                                 round_trip(args.ping_pong, base, args.seconds, sizes),
                                 round_trip(args.ping_pong, base, args.seconds, (64, 64)))
        (ig, ig_own, model_run), fl = figures["infergate"], figures["floor"]
        hot, gapped, small = figures["ping"]
        print(f"| {r} | {base:.0f} | {ig:+.0f} | {model_run:.0f} | {ig_own:+.0f} | {fl:+.0f} | {hot:.0f} | "
              f"{gapped:.0f} | {gapped - hot:+.0f} | {small:.0f} |", flush=True)
    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
