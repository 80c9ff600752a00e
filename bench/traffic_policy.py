#!/usr/bin/env python3
"""What the traffic policy at the edge costs and gains, as ratios measured in one run:

1. The response cache, hit against miss, at concurrency 8 (8 client processes, one keep-alive
   TLS connection each, KServe v2 with binary tensors), on two models:
   - the MLP of bench/cpu_per_request.py ([N,1024] -> [N,1000], batching as there): a cheap
     model, so the ratio shows the cache's own cost. Figure: server CPU per answer (its whole
     process, /proc/PID/stat, over the run / answers). Goal: a hit costs <= 0.6x a miss.
   - MiniLM ([1,32] INT64 x 3): answers per second. Goal: hits >= 10x misses.
   A hit is the same request again (one body for every request); a miss is the same request on
   a server whose cache is too small to keep the answer (`--cache-bytes 1024`: every lookup
   misses and every answer is refused as too large), so it pays the lookup as well as the model.
2. The traffic split and the token policy, per request: the tiny model (Add on [1,16], two
   versions) at concurrency 8, server CPU per request on the defaults against the same server
   with a split (50/50, sticky by key) and a key with token limits (chat-only, checked and
   passed on every request). Goal: <= 5 us added per request.

Each case starts its own server (fresh data directory) and is measured `--repeat` times; the
medians are compared. Figures are provisional on a shared machine: compare the ratios.

Usage: bench/traffic_policy.py [--seconds 4] [--repeat 3] [--concurrency 8]
Needs: scripts/setup.sh; a build of infergate (INFERGATE_BIN, default target/release/infergate).
"""
import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402  (start_server, BIN, MODELS)
from cpu_per_request import CONFIG as MLP_CONFIG, IN as MLP_IN, cpu_split, write_mlp  # noqa: E402
from replica_overhead import write_model as write_tiny  # noqa: E402


def binary_body(inputs):
    """A KServe v2 binary request: JSON header, then each input's bytes; binary outputs."""
    header = {"inputs": [], "outputs": [], "parameters": {"binary_data_output": True}}
    raw = b""
    for name, array, datatype in inputs:
        data = np.ascontiguousarray(array).tobytes()
        header["inputs"].append({"name": name, "shape": list(array.shape), "datatype": datatype,
                                 "parameters": {"binary_data_size": len(data)}})
        raw += data
    text = json.dumps(header).encode()
    return text + raw, len(text)


def client(args):
    """One client process: requests back to back until the deadline; (answers, failures)."""
    host, port, cert, key, path, body, header_len, deadline = args
    context = ssl.create_default_context(cafile=cert)
    conn = http.client.HTTPSConnection(host, port, context=context)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream",
               "Inference-Header-Content-Length": str(header_len)}
    ok = failed = 0
    while time.time() < deadline:
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        r.read()
        if r.status == 200:
            ok += 1
        else:
            failed += 1
    return ok, failed


def drive(addr, cert, key, path, body, header_len, seconds, concurrency):
    """(answers/s, server CPU seconds) of `concurrency` clients for `seconds`."""
    host, port = addr.rsplit(":", 1)
    start = time.time() + 0.5
    jobs = [(host, int(port), cert, key, path, body, header_len, start + seconds)] * concurrency
    with multiprocessing.Pool(concurrency) as pool:
        results = pool.map(client, jobs)
    ok = sum(r[0] for r in results)
    failed = sum(r[1] for r in results)
    if failed:
        raise SystemExit(f"{failed} requests failed")
    return ok


def serve_case(models, server_args, key_args=(), policy=None):
    """A fresh data directory with `models` [(name, path, config)], a server on it; returns
    (proc, addr, cert, key, data)."""
    data = tempfile.mkdtemp(prefix="infergate-traffic-")
    for name, path, config in models:
        cmd = [serving.BIN, "models", "add", "--data-dir", data, "--name", name]
        if config:
            cmd += ["--config", json.dumps(config)]
        subprocess.run(cmd + [path], check=True, capture_output=True)
    key = subprocess.run([serving.BIN, "keys", "create", "--data-dir", data, "--scope", "infer",
                          *key_args], check=True, capture_output=True, text=True).stdout.strip()
    proc, addrs = serving.start_server(data, extra_args=server_args)
    cert = os.path.join(data, "tls", "cert.pem")
    if policy:
        # The server makes no admin key of its own on a data directory that has keys already.
        admin = subprocess.run([serving.BIN, "keys", "create", "--data-dir", data, "--scope", "admin"],
                               check=True, capture_output=True, text=True).stdout.strip()
        name, body = policy
        out = subprocess.run(["curl", "-sf", "--cacert", cert, "-X", "PUT", "-H", f"Authorization: Bearer {admin}",
                              serving.url(addrs["http"], f"/api/models/{name}/traffic"), "-d", json.dumps(body)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"traffic policy refused: {out.stdout} {out.stderr}")
    return proc, addrs["http"], cert, key, data


def measure(case, seconds, concurrency):
    """One case: (answers/s, server CPU µs per answer)."""
    proc, addr, cert, key, data = serve_case(case["models"], case["server_args"], case.get("key_args", ()),
                                             case.get("policy"))
    try:
        body, header_len = case["body"]
        # Warm: load the model, fill the cache.
        drive(addr, cert, key, case["path"], body, header_len, 1.0, 1)
        user0, kernel0 = cpu_split(proc.pid)
        t0 = time.time()
        ok = drive(addr, cert, key, case["path"], body, header_len, seconds, concurrency)
        elapsed = time.time() - t0 - 0.5
        user1, kernel1 = cpu_split(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    return ok / elapsed, (user1 - user0 + kernel1 - kernel0) / ok * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="infergate-traffic-models-")
    mlp, tiny = os.path.join(work, "mlp.onnx"), os.path.join(work, "tiny.onnx")
    write_mlp(mlp)
    write_tiny(tiny)
    minilm = os.path.join(serving.MODELS, "minilm.onnx")
    rng = np.random.default_rng(3)
    mlp_body = binary_body([("input", rng.random((1, MLP_IN), dtype=np.float32), "FP32")])
    minilm_body = binary_body([
        ("input_ids", rng.integers(1000, 20000, (1, 32)).astype(np.int64), "INT64"),
        ("attention_mask", np.ones((1, 32), np.int64), "INT64"),
        ("token_type_ids", np.zeros((1, 32), np.int64), "INT64"),
    ])
    tiny_body = binary_body([("input", rng.random((1, 16), dtype=np.float32), "FP32")])
    cached = {"response_cache": {"enable": True}}
    big, small = ["--cache-bytes", str(64 << 20)], ["--cache-bytes", "1024"]
    cases = {
        "mlp hit": dict(models=[("mlp", mlp, {**MLP_CONFIG, **cached})], server_args=big,
                        path="/v2/models/mlp/infer", body=mlp_body),
        "mlp miss": dict(models=[("mlp", mlp, {**MLP_CONFIG, **cached})], server_args=small,
                         path="/v2/models/mlp/infer", body=mlp_body),
        "minilm hit": dict(models=[("minilm", minilm, cached)], server_args=big,
                           path="/v2/models/minilm/infer", body=minilm_body),
        "minilm miss": dict(models=[("minilm", minilm, cached)], server_args=small,
                            path="/v2/models/minilm/infer", body=minilm_body),
        "tiny plain": dict(models=[("tiny", tiny, None), ("tiny", tiny, None)], server_args=[],
                           path="/v2/models/tiny/infer", body=tiny_body),
        "tiny split+tokens": dict(models=[("tiny", tiny, None), ("tiny", tiny, None)], server_args=[],
                                  key_args=["--tokens-per-minute", "1000000", "--token-budget", "1000000000/month"],
                                  policy=("tiny", {"split": [{"version": 1, "weight": 1}, {"version": 2, "weight": 1}],
                                                   "sticky": "key"}),
                                  path="/v2/models/tiny/infer", body=tiny_body),
    }
    print(f"infergate {serving.BIN}; concurrency {args.concurrency}, {args.seconds:g} s per run, "
          f"{args.repeat} runs per case, alternating; load average {os.getloadavg()[0]:.2f}\n")
    runs = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, case in cases.items():
            runs[name].append(measure(case, args.seconds, args.concurrency))
    med = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
           for name, rs in runs.items()}
    print("| case | answers/s | server CPU µs/answer |")
    print("| --- | --- | --- |")
    for name, (rate, cpu) in med.items():
        print(f"| {name} | {rate:.0f} | {cpu:.1f} |")
    print()
    print(f"MLP: CPU per hit / per miss = {med['mlp hit'][1] / med['mlp miss'][1]:.2f} (goal <= 0.6)")
    print(f"MiniLM: answers/s hit / miss = {med['minilm hit'][0] / med['minilm miss'][0]:.1f}x (goal >= 10x)")
    print(f"split + token policy: {med['tiny split+tokens'][1] - med['tiny plain'][1]:+.1f} µs CPU per request "
          f"(goal <= 5)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
