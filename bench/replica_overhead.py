#!/usr/bin/env python3
"""What running as a replica costs a request: the same server, key and model on the defaults
(SQLite store, the replica's own rate limiter: the baseline), on a PostgreSQL store
(`--store postgres://`, a real PostgreSQL started here) and with the cluster-wide limiter
(`--ratelimit redis://`, a real redis-server started here), all on loopback, measured in one
run with perf_analyzer over KServe v2 HTTP (TLS).

The model is tiny (an Add on [1,16]) so that what the store or the limiter add is as visible as
it can be. The key has a rate limit far above what is sent (every request is checked, none
refused). Each setting is measured `--repeat` times, alternating, and the medians are compared
with the baseline:
- added p50 at concurrency 1 (PostgreSQL: target not measurable, keys come from the replica's
  cache; Redis: the round trip the request waits for, target <= 100 us);
- inferences/s at concurrency 8 over the baseline's (requests/s per replica).

Usage: bench/replica_overhead.py [--seconds 4] [--repeat 2]
Needs: scripts/setup.sh (postgresql, redis-server), bench/setup-perf-analyzer.sh,
`cargo build --release -p infergate` (or INFERGATE_BIN).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402  (start_server, perf_analyzer, paths)

WIDTH = 16


def write_model(path):
    bias = numpy_helper.from_array(np.ones(WIDTH, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Add", ["input", "b"], ["output"])], "add",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, WIDTH])],
        initializer=[bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(directory):
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", directory],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if time.time() > deadline:
                proc.kill()
                sys.exit("redis-server did not listen within 10 s (scripts/setup.sh installs it)")
            time.sleep(0.05)


def start_postgres(directory):
    """initdb + postgres on a random port (as the `postgres` user when root, which initdb
    refuses to run as); returns (process, URL)."""
    bins = sorted((d for d in os.listdir("/usr/lib/postgresql") if d.isdigit()), key=int)
    if not bins:
        sys.exit("PostgreSQL is not installed (scripts/setup.sh installs Debian's postgresql)")
    bin_dir = f"/usr/lib/postgresql/{bins[-1]}/bin"
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pg = os.path.join(directory, "pg")
    os.makedirs(pg)
    if as_user:
        subprocess.run(["chown", "postgres:", pg], check=True)
    subprocess.run(as_user + [f"{bin_dir}/initdb", "-D", f"{pg}/data", "-U", "postgres", "--auth=trust",
                              "--locale=C", "-E", "UTF8", "-N"], check=True, capture_output=True)
    port = free_port()
    proc = subprocess.Popen(as_user + [f"{bin_dir}/postgres", "-D", f"{pg}/data", "-p", str(port), "-k", pg,
                                       "-c", "listen_addresses=127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while subprocess.run([f"{bin_dir}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode:
        if time.time() > deadline:
            sys.exit("postgres did not accept connections within 30 s")
        time.sleep(0.1)
    return proc, f"postgres://postgres@127.0.0.1:{port}/postgres", f"{pg}/data/postmaster.pid"


def create_key(addr, cert, admin):
    body = json.dumps({"name": "bench", "scopes": ["infer"],
                       "rate_limit": {"rps": 1_000_000, "burst": 1_000_000}})
    out = subprocess.run(["curl", "-sf", "--cacert", cert, "-H", f"Authorization: Bearer {admin}",
                          "-H", "Content-Type: application/json", "-d", body,
                          f"https://{addr}/api/keys"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["secret"]


def measure(pa, data, extra_args, seconds):
    """((c=1 p50 µs), (c=8 inferences/s)) for one server."""
    proc, addrs = serving.start_server(data, extra_args=extra_args)
    try:
        admin = open(os.path.join(data, "admin.key")).read().strip()
        cert = os.path.join(data, "tls", "cert.pem")
        key = create_key(addrs["http"], cert, admin)
        data_file = os.path.join(data, "add-input.json")
        with open(data_file, "w") as f:
            json.dump({"data": [{"input": {"content": [0.5] * WIDTH, "shape": [1, WIDTH]}}]}, f)
        run = lambda c, s: serving.perf_analyzer(pa, "http", addrs["http"], cert, key, "add", data_file, [],
                                                c, s)
        run(1, 1.0)  # load and warm
        _, p50, _ = run(1, seconds)
        throughput, _, _ = run(8, seconds)
        return p50, throughput
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    pa = serving.perf_analyzer_command()
    work = tempfile.mkdtemp(prefix="infergate-replica-bench-")
    os.chmod(work, 0o711)  # PostgreSQL's own user must reach its directory inside
    redis, port = start_redis(work)
    postgres = None
    try:
        postgres, pg_url, pg_pid = start_postgres(work)
        model = os.path.join(work, "add.onnx")
        write_model(model)
        settings = {
            "SQLite store, own limiter (baseline)": ({}, []),
            "PostgreSQL store": ({"INFERGATE_STORE": pg_url}, ["--store", pg_url]),
            "Redis limiter": ({}, ["--ratelimit", f"redis://127.0.0.1:{port}/0"]),
        }
        dirs = {}
        for i, (name, (env, _)) in enumerate(settings.items()):
            dirs[name] = os.path.join(work, f"data-{i}")
            os.makedirs(dirs[name])
            subprocess.run([serving.BIN, "models", "add", "--data-dir", dirs[name], "--name", "add", model],
                           check=True, capture_output=True, env={**os.environ, **env})
        results = {name: [] for name in settings}
        for _ in range(args.repeat):
            for name, (_, extra) in settings.items():
                results[name].append(measure(pa, dirs[name], extra, args.seconds))
        print(f"Add [1,{WIDTH}], perf_analyzer HTTP, {args.seconds:g} s per point, {args.repeat} runs "
              f"each, alternating; load average {os.getloadavg()[0]:.2f}\n")
        print("| setting | c=1 p50 µs (runs) | c=8 inferences/s (runs) |")
        print("| --- | --- | --- |")
        med = {}
        for name, runs in results.items():
            p50s, rates = [r[0] for r in runs], [r[1] for r in runs]
            med[name] = (statistics.median(p50s), statistics.median(rates))
            print(f"| {name} | {med[name][0]:.0f} ({', '.join(f'{p:.0f}' for p in p50s)}) | "
                  f"{med[name][1]:.0f} ({', '.join(f'{r:.0f}' for r in rates)}) |")
        base = med["SQLite store, own limiter (baseline)"]
        print()
        for name, target in [("PostgreSQL store", "not measurable"), ("Redis limiter", "<= 100 us")]:
            print(f"{name}: added p50 at c=1 {med[name][0] - base[0]:+.0f} µs (target {target}); "
                  f"inferences/s at c=8 over the baseline {med[name][1] / base[1]:.2f}")
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        if postgres is not None:
            # The postmaster (the child may be runuser): a fast shutdown.
            try:
                subprocess.run(["kill", "-INT", open(pg_pid).readline().strip()])
            except OSError:
                pass
            postgres.wait(timeout=30)
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
