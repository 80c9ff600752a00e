"""The load client of the fault tests, run inside its own network namespace: N kept-alive
HTTPS connections to a manager (or to gateway replicas: connection i goes to the i-th `--host`,
round robin), each sending KServe v2 requests to an identity model (FP32
[1, W]) one after another, and checking that each answer gives back what was sent.

Every request becomes one JSON line in `--out` (id, connection, start and end on the machine's
monotonic clock, status, cause, error): the harness reads them to count requests sent,
answered and failed by cause, and to find requests that hung. Every 0.1 s a line `{"event":
"open", "time", "oldest"}` gives the start of the oldest request still open. Causes: `ok`, `wrong-answer`
(200 whose tensor is not the one sent), `http-<status>` (an error answer), `timeout` (no answer
within `--timeout`), `connection` (refused, reset or closed). The client never retries: retries
are the manager's, counted there.

Bounded: it stops at `--max-requests` or `--max-seconds`, or on SIGTERM; requests still open
then are written as `unfinished`. Standard library only."""
import argparse
import json
import random
import signal
import socket
import ssl
import sys
import threading
import time
import http.client

from tls_client import ManagerConnection, identity_body, request


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", required=True, action="append", help="repeat for several gateways")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", default="x")
    ap.add_argument("--output", default="y")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--max-requests", type=int, required=True)
    ap.add_argument("--max-seconds", type=float, required=True)
    ap.add_argument("--timeout", type=float, required=True, help="seconds a request may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds each connection waits between requests")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    Load(args).run()


class Load:
    def __init__(self, args):
        self.args = args
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.pending = []
        self.open = {}
        self.out = open(args.out, "w", buffering=1 << 16)

    def run(self):
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        threads = [threading.Thread(target=self.connection, args=(c,), daemon=True)
                   for c in range(self.args.connections)]
        started = time.monotonic()
        for t in threads:
            t.start()
        self.emit({"event": "started", "time": started})
        deadline = started + self.args.max_seconds
        while not self.stop.is_set() and time.monotonic() < deadline:
            self.stop.wait(0.1)
            self.flush()
            with self.lock:
                oldest = min((start for _, start in self.open.values()), default=None)
            self.emit({"event": "open", "time": time.monotonic(), "oldest": oldest})
        self.stop.set()
        # Connections finish the request they are in, up to its own timeout.
        for t in threads:
            t.join(timeout=max(0.0, self.args.timeout + 1 - (time.monotonic() - deadline)))
        now = time.monotonic()
        with self.lock:
            for rid, (conn, start) in self.open.items():
                self.pending.append({"id": rid, "conn": conn, "start": start, "end": None,
                                     "status": None, "cause": "unfinished", "error": f"open at stop ({now - start:.1f} s)"})
        self.flush()
        self.emit({"event": "stopped", "time": now, "sent": self.sent})
        self.out.close()
        sys.stdout.flush()

    def emit(self, record):
        with self.lock:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()

    def flush(self):
        with self.lock:
            records, self.pending = self.pending, []
            for r in records:
                self.out.write(json.dumps(r) + "\n")
            self.out.flush()

    def next_id(self, conn):
        with self.lock:
            if self.sent >= self.args.max_requests:
                self.stop.set()
                return None
            self.sent += 1
            rid = f"c{conn}-{self.sent}"
            self.open[rid] = (conn, time.monotonic())
            return rid

    def connection(self, conn_no):
        a = self.args
        rng = random.Random(a.seed * 1000 + conn_no)
        conn = None
        host = a.host[conn_no % len(a.host)]
        path = f"/v2/models/{a.model}/infer"
        while not self.stop.is_set():
            rid = self.next_id(conn_no)
            if rid is None:
                break
            # Multiples of 1/8 survive FP32 and JSON exactly: an identity model returns them as sent.
            values = [rng.randrange(-64, 64) / 8 for _ in range(a.width)]
            body = identity_body(rid, values, a.input, a.output)
            status, cause, error = None, "ok", ""
            try:
                if conn is None:
                    conn = ManagerConnection(host, a.port, a.ca, a.timeout)
                status, _, raw = request(conn, "POST", path, key=a.key, body=body, headers={"X-Request-Id": rid})
                if status == 200:
                    try:
                        got = json.loads(raw)["outputs"][0]["data"]
                    except (ValueError, KeyError, IndexError, TypeError) as e:
                        got = f"undecodable answer: {e}"
                    if got != values:
                        cause, error = "wrong-answer", str(got)[:200]
                else:
                    cause = f"http-{status}"
                    try:
                        error = json.loads(raw).get("error", "")
                    except ValueError:
                        error = raw[:200].decode("utf-8", "replace")
            except socket.timeout as e:
                cause, error = "timeout", str(e)
            except (OSError, http.client.HTTPException, ssl.SSLError) as e:
                cause, error = "connection", f"{type(e).__name__}: {e}"
            if cause in ("timeout", "connection") and conn is not None:
                conn.close()
                conn = None
            with self.lock:
                _, start = self.open.pop(rid)
                self.pending.append({"id": rid, "conn": conn_no, "host": host, "start": start,
                                     "end": time.monotonic(), "status": status, "cause": cause, "error": error})
            if a.pause:
                self.stop.wait(a.pause)
        if conn is not None:
            conn.close()


if __name__ == "__main__":
    main()
