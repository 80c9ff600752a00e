"""Runs the load client ([`load.py`](load.py)) in its node's namespace against a cluster, and
reads back what each request did."""
import json
import os
import signal
import subprocess
import sys
import time

import tls_client
from cluster import MANAGER_PORT

HERE = os.path.dirname(os.path.abspath(__file__))


class LoadRun:
    """`connections` connections of load until `stop()`, at most `max_requests` requests and
    `max_seconds` seconds; a request may take `timeout` s before the client gives up on it.
    `hosts`: the gateways the connections go to, round robin (default: the cluster's manager);
    `key`: the API key (default: the cluster's); `pause`: seconds between a connection's
    requests."""

    def __init__(self, cluster, connections, max_requests, max_seconds, timeout, seed, hosts=None, key=None,
                 pause=0.0, name="load"):
        self.cluster = cluster
        self.out = os.path.join(cluster.network.tmp, f"{name}.jsonl")
        self.timeout = timeout
        hosts = hosts or [cluster.manager_node.ip]
        argv = [sys.executable, os.path.join(HERE, "load.py"),
                *[arg for host in hosts for arg in ("--host", host)], "--port", str(MANAGER_PORT),
                "--ca", cluster.ca, "--key", key or cluster.key, "--model", cluster.model,
                "--width", str(cluster.width), "--connections", str(connections),
                "--max-requests", str(max_requests), "--max-seconds", str(max_seconds),
                "--timeout", str(timeout), "--seed", str(seed), "--pause", str(pause), "--out", self.out]
        self.stderr = open(os.path.join(cluster.network.tmp, f"{name}.err"), "w")
        self.proc = subprocess.Popen(cluster.client.exec_args(*argv), stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, start_new_session=True)

    def _lines(self):
        if not os.path.exists(self.out):
            return []
        with open(self.out) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]

    def records(self):
        """Every request finished so far (dicts as `load.py` writes them)."""
        return [r for r in self._lines() if "id" in r]

    def none_open_from_before(self, moment):
        """When the client first saw no request open that had started before `moment`; None
        if not yet."""
        for e in self._lines():
            if e.get("event") == "open" and e["time"] >= moment and (e["oldest"] is None or e["oldest"] >= moment):
                return e["time"]
        return None

    def wait_answered(self, count, timeout):
        """Until `count` requests were answered 200 (the cluster serves), at most `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            ok = sum(r["cause"] == "ok" for r in self.records())
            if ok >= count:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                with open(self.stderr.name) as f:
                    err = f.read()[-2000:]
                raise AssertionError(f"{ok} of {count} requests answered within {timeout:.0f} s; "
                                     f"load client: {self.proc.poll()} {err}")
            time.sleep(0.1)

    def stop(self):
        """Stops sending and waits for the requests still open (up to their timeout): all
        records."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.timeout + 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return self.records()



def probe(cluster, rid, timeout):
    """One request on a fresh connection from the client's node, apart from the load: (status
    or the error's name, seconds it took)."""
    def once():
        conn = tls_client.ManagerConnection(cluster.manager_node.ip, MANAGER_PORT, cluster.ca, timeout)
        started = time.monotonic()
        try:
            body = tls_client.identity_body(rid, [1.0] * cluster.width)
            status, _, _ = tls_client.request(conn, "POST", f"/v2/models/{cluster.model}/infer", key=cluster.key,
                                              body=body, headers={"X-Request-Id": rid})
        except OSError as e:
            status = type(e).__name__
        finally:
            conn.close()
        return status, time.monotonic() - started
    return cluster.client.call(once, timeout=timeout + 5)
