"""An infergate cluster on a test network: a manager (routing only) and workers, each in its own
namespace, started from the binary at `INFERGATE_BIN`. The manager's API is reached from the
client's namespace (threads entered there), never from the machine's own network.

The `[cluster]` settings are the test's: the time bounds a scenario asserts are derived from
them (`Timing`), never fixed figures."""
import dataclasses
import json
import os
import re
import signal
import subprocess
import time

import tls_client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "debug", "infergate"))
MANAGER_PORT = 8443
METRICS_PORT = 9090
WORKER_PORT = 8445
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclasses.dataclass(frozen=True)
class Timing:
    """The cluster's heartbeat settings and the bounds derived from them. `slack` is generous
    (twice the detection budget): the machines these tests run on are shared and slow, and a
    bound that a loaded machine can miss would make the test flaky, not stricter."""
    heartbeat_ms: int = 500
    missed_heartbeats: int = 3
    request_timeout_s: int = 60
    # The hop's own deadlines: a connection to a worker whose peer acknowledges nothing for
    # link_timeout_ms fails; connecting (TCP, TLS, HTTP) may take connect_timeout_ms.
    link_timeout_ms: int = 2000
    connect_timeout_ms: int = 1000

    @classmethod
    def from_env(cls, **given):
        """The settings given, with `INFERGATE_FAULTS_HEARTBEAT_MS` and
        `INFERGATE_FAULTS_MISSED_HEARTBEATS` over them: how `scripts/faults.sh` measures
        detection times against the heartbeat settings."""
        for field, var in (("heartbeat_ms", "INFERGATE_FAULTS_HEARTBEAT_MS"),
                           ("missed_heartbeats", "INFERGATE_FAULTS_MISSED_HEARTBEATS")):
            if os.environ.get(var):
                given[field] = int(os.environ[var])
        return cls(**given)

    @property
    def interval(self):
        return self.heartbeat_ms / 1000

    @property
    def budget(self):
        """How long after its last heartbeat a worker is lost."""
        return self.interval * self.missed_heartbeats

    @property
    def slack(self):
        return 2 * self.budget

    @property
    def detect_bound(self):
        """Lost within this after a cut (its last heartbeat came before the cut)."""
        return self.budget + self.slack

    @property
    def link_bound(self):
        """A request on a worker the manager cannot reach while its heartbeats still arrive
        ends within this: its connection's silence deadline, then a connection to another
        worker."""
        return (self.link_timeout_ms + self.connect_timeout_ms) / 1000 + self.slack

    @property
    def hold_bound(self):
        """No request stays on a worker that stopped answering longer than this."""
        return max(self.detect_bound, self.link_bound)

    @property
    def recover_bound(self):
        """Ready again within this after a heal: the next heartbeat, plus one that was in flight
        and timed out (the worker's heartbeat timeout is an interval, at least 1 s)."""
        return self.interval + max(self.interval, 1.0) + self.slack

    def cluster_toml(self):
        return (f"[cluster]\nheartbeat_ms = {self.heartbeat_ms}\nmissed_heartbeats = {self.missed_heartbeats}\n"
                f"request_timeout_s = {self.request_timeout_s}\nlink_timeout_ms = {self.link_timeout_ms}\n"
                f"connect_timeout_ms = {self.connect_timeout_ms}\n")


def identity_model(path, width=16):
    """An ONNX model y = Identity(x), x and y FP32 [N, width]: the model's run costs nothing,
    so what a scenario measures is the cluster's."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def cli(*args):
    """The offline CLI (files only, no network): its stdout."""
    done = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"infergate {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


class Process:
    """An infergate process in a node's namespace, its log in a file. `stop()` ends it."""

    def __init__(self, node, argv, log, env=None):
        self.node = node
        self.log_path = log
        self._log = open(log, "w")
        self._read = 0
        full_env = {**os.environ, "INFERGATE_LOG": os.environ.get("INFERGATE_FAULTS_LOG", "info"), **(env or {})}
        # `ip netns exec` execs the program: this pid is infergate's (SIGSTOP reaches it).
        self.proc = subprocess.Popen(node.exec_args(*argv), stdout=subprocess.DEVNULL, stderr=self._log,
                                     env=full_env, start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def rss_bytes(self):
        """Its resident memory (Linux), from /proc."""
        with open(f"/proc/{self.pid}/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kib * 1024

    def open_files(self):
        """Its open file descriptors (sockets included)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def lines(self):
        with open(self.log_path, errors="replace") as f:
            return [_ANSI.sub("", line.rstrip("\n")) for line in f]

    def wait_for_log(self, pattern, timeout):
        """The first log line matching `pattern` within `timeout` s; a process that exits or
        stays silent fails with its last lines."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            for line in self.lines():
                if regex.search(line):
                    return line
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self.lines()[-20:])
                state = f"exited {self.proc.returncode}" if self.proc.poll() is not None else "still running"
                raise RuntimeError(f"{self.node.name}: no log line /{pattern}/ within {timeout} s ({state}); last lines:\n{tail}")
            time.sleep(0.05)

    def stop(self, grace=10):
        """SIGCONT (it may be paused), SIGTERM, then SIGKILL after `grace` s; its exit status."""
        if self.proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                try:
                    os.kill(self.proc.pid, sig)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def show_logs(processes, lines=15):
    """Prints the last lines of each process's log: a failing scenario's evidence."""
    for name, process in processes.items():
        print(f"--- last lines of {name}'s log:\n" + "\n".join(process.lines()[-lines:]))


def stop_all(*parts):
    """Stops each of `parts` that was started (None: it never was), in order."""
    for part in parts:
        if part is not None:
            part.stop()


class Cluster:
    """A manager on node `manager` and a worker on each of `workers`, the identity model
    registered as `model`. Requests and admin calls go from node `client`."""

    def __init__(self, network, manager, workers, client, timing, model="identity", width=16):
        self.network = network
        self.timing = timing
        self.model = model
        self.width = width
        self.client = client
        self.manager_node = manager
        self.processes = {}
        tmp = network.tmp
        self.data = os.path.join(tmp, "manager")
        os.makedirs(self.data)
        config = os.path.join(tmp, "infergate.toml")
        with open(config, "w") as f:
            f.write(timing.cluster_toml())
        cli("models", "add", "--data-dir", self.data, "--name", model,
            identity_model(os.path.join(tmp, "identity.onnx"), width))
        self.manager = Process(manager, [
            BIN, "serve", "--listen", f"{manager.ip}:{MANAGER_PORT}", "--data-dir", self.data,
            "--no-local-engine", "--no-grpc", "--config", config, "--log-format", "json",
            "--metrics-listen", f"{manager.ip}:{METRICS_PORT}"], os.path.join(tmp, "manager.log"))
        self.processes[manager.name] = self.manager
        self.manager.wait_for_log(r"listening on https://", 60)
        with open(os.path.join(self.data, "admin.key")) as f:
            self.admin_key = f.read().strip()
        self.ca = os.path.join(self.data, "tls", "cert.pem")
        self.key = cli("keys", "create", "--scope", "infer", "--data-dir", self.data)
        secret = cli("workers", "token", "create", "--data-dir", self.data)
        self.workers = {}
        for node in workers:
            wdata = os.path.join(tmp, f"worker-{node.name}")
            process = Process(node, [
                BIN, "worker", "--join", f"https://{manager.ip}:{MANAGER_PORT}", "--join-token", secret,
                "--listen", f"{node.ip}:{WORKER_PORT}", "--advertise", f"{node.ip}:{WORKER_PORT}",
                "--data-dir", wdata, "--instances", "1", "--intra-threads", "1"],
                os.path.join(tmp, f"{node.name}.log"))
            self.processes[node.name] = process
            self.workers[node.name] = process
        for process in self.workers.values():
            process.wait_for_log(r"worker listening on", 60)
        self.ids = {}
        self.until(lambda ws: len(ws) == len(workers) and all(w["state"] == "ready" for w in ws),
                   "every worker joined and ready", 10 * timing.budget + 10)
        # Worker ids by node, from their advertised addresses.
        by_address = {w["advertise"]: w["id"] for w in self.view()}
        self.ids = {n.name: by_address[f"{n.ip}:{WORKER_PORT}"] for n in workers}

    # The manager's API, from the client's namespace.

    def api(self, path):
        host = self.manager_node.ip
        return self.client.call(tls_client.get_json, host, MANAGER_PORT, self.ca, path, self.admin_key)

    def call(self, method, path, key=None, body=None, timeout=10):
        """One request to the manager from the client's node on a fresh connection: (status or
        the error's name, decoded JSON or None)."""
        host = self.manager_node.ip

        def once():
            conn = tls_client.ManagerConnection(host, MANAGER_PORT, self.ca, timeout)
            try:
                status, _, raw = tls_client.request(conn, method, path, key=key or self.admin_key, body=body)
            except OSError as e:
                return type(e).__name__, None
            finally:
                conn.close()
            try:
                return status, json.loads(raw) if raw else None
            except ValueError:
                return status, None
        return self.client.call(once, timeout=timeout + 5)

    def view(self):
        """`GET /api/workers`: one dict per worker."""
        return self.api("/api/workers")["workers"]

    def until(self, done, what, timeout, every=None):
        """Polls the workers' view until `done(view)` holds: the time it first held."""
        deadline = time.monotonic() + timeout
        every = every or self.timing.interval / 5
        while True:
            view = self.view()
            if done(view):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.1f} s; workers: {json.dumps(view, indent=1)}")
            time.sleep(every)

    def state(self, view, node_name):
        wid = self.ids[node_name]
        return next((w["state"] for w in view if w["id"] == wid), None)

    def metrics(self):
        """The manager's Prometheus text, as {name{labels}: value}."""
        import http.client

        def fetch():
            conn = http.client.HTTPConnection(self.manager_node.ip, METRICS_PORT, timeout=10)
            try:
                conn.request("GET", "/metrics")
                return conn.getresponse().read().decode()
            finally:
                conn.close()
        out = {}
        for line in self.client.call(fetch).splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def counter(self, metrics, name):
        """A counter's value summed over its labels (0 when absent)."""
        total = 0.0
        for key, value in metrics.items():
            base = key.split("{", 1)[0]
            if base in (name, f"{name}_total"):
                total += value
        return total

    def manager_events(self, message):
        """The manager's JSON log lines whose message contains `message`."""
        found = []
        for line in self.manager.lines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if message in json.dumps(event.get("fields", {})):
                found.append(event)
        return found

    def stop(self):
        for process in self.workers.values():
            process.stop()
        self.manager.stop()

