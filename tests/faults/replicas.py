"""Gateway replicas on a test network: PostgreSQL and Redis each in a namespace of their own,
and replicas (`infergate serve --store postgres://...`, local engine on) each in theirs, the
identity model registered in PostgreSQL. Requests and admin calls go from node `client`.

PostgreSQL is Debian's: a fresh cluster (`initdb`) in the network's temporary directory, owned
by and run as the `postgres` user (it refuses root), trusting the test network's addresses
only. Redis is `redis-server` without persistence. Both are stopped with the network (every
process left in its namespaces is killed when the network is removed)."""
import glob
import json
import os
import pwd
import shutil
import subprocess
import time

import tls_client
from cluster import BIN, MANAGER_PORT, METRICS_PORT, Process, identity_model
from netns import SUBNET

PG_PORT = 5432
REDIS_PORT = 6379


def pg_bin():
    """The newest `/usr/lib/postgresql/<version>/bin` holding `initdb` (or `$INFERGATE_PG_BIN`)."""
    given = os.environ.get("INFERGATE_PG_BIN")
    if given:
        return given
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): scripts/setup.sh "
                           "installs it, or set INFERGATE_PG_BIN")
    return os.path.dirname(found[-1])


def server_user():
    """The account PostgreSQL runs as: `postgres` where it exists, else `nobody`."""
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("neither a postgres nor a nobody account to run PostgreSQL as")


class Postgres:
    def __init__(self, node, tmp):
        self.node = node
        user = server_user()
        self.dir = os.path.join(tmp, "pg")
        os.makedirs(self.dir)
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        os.chmod(tmp, 0o755)
        data = os.path.join(self.dir, "data")
        as_user = ["runuser", "-u", user.pw_name, "--"]
        done = subprocess.run([*as_user, os.path.join(pg_bin(), "initdb"), "-D", data, "-U", "postgres",
                               "--auth=trust", "--locale=C", "-E", "UTF8", "-N"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        with open(os.path.join(data, "pg_hba.conf"), "a") as f:
            f.write(f"host all all {SUBNET}.0/24 trust\n")
        self.process = Process(node, [*as_user, os.path.join(pg_bin(), "postgres"), "-D", data, "-p", str(PG_PORT),
                                      "-k", self.dir, "-c", f"listen_addresses={node.ip}", "-c", "fsync=off",
                                      "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                               os.path.join(tmp, "pg.log"))
        deadline = time.monotonic() + 60
        while subprocess.run(node.exec_args(os.path.join(pg_bin(), "pg_isready"), "-q", "-h", node.ip,
                                            "-p", str(PG_PORT))).returncode != 0:
            if self.process.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not start:\n" + "\n".join(self.process.lines()[-20:]))
            time.sleep(0.1)

    @property
    def url(self):
        return f"postgres://postgres@{self.node.ip}:{PG_PORT}/postgres"


class Redis:
    def __init__(self, node, tmp):
        self.node = node
        log = os.path.join(tmp, "redis.log")
        self.process = Process(node, [shutil.which("redis-server") or "redis-server", "--bind", node.ip,
                                      "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no",
                                      "--protected-mode", "no", "--dir", tmp, "--logfile", log],
                               os.path.join(tmp, "redis.err"))
        deadline = time.monotonic() + 30
        while subprocess.run(node.exec_args("redis-cli", "-h", node.ip, "-p", str(REDIS_PORT), "ping"),
                             capture_output=True, text=True).stdout.strip() != "PONG":
            if self.process.proc.poll() is not None or time.monotonic() > deadline:
                with open(log) as f:
                    raise RuntimeError("Redis did not start:\n" + f.read()[-2000:])
            time.sleep(0.1)

    @property
    def url(self):
        return f"redis://{self.node.ip}:{REDIS_PORT}/0"


class Replicas:
    """A replica on each of `nodes` (their `[store]`/`[limits]` settings from `config(node)`, a
    TOML text), on `pg`; the identity model registered as `model`. They share one TLS
    certificate (the first replica's), so that a client trusts them all alike."""

    def __init__(self, network, pg, nodes, client, config, model="identity", width=16):
        self.network = network
        self.model = model
        self.width = width
        self.client = client
        self.pg = pg
        self.nodes = nodes
        self.processes = {}
        tmp = network.tmp
        env = {"INFERGATE_STORE": pg.url}
        first = os.path.join(tmp, f"data-{nodes[0].name}")
        os.makedirs(first)
        self.cli(nodes[0], env, "models", "add", "--data-dir", first, "--name", model,
                 identity_model(os.path.join(tmp, "identity.onnx"), width))
        for node in nodes:
            data = os.path.join(tmp, f"data-{node.name}")
            os.makedirs(data, exist_ok=True)
            if node is not nodes[0]:
                shutil.copytree(os.path.join(first, "tls"), os.path.join(data, "tls"))
            path = os.path.join(tmp, f"{node.name}.toml")
            with open(path, "w") as f:
                f.write(config(node))
            process = Process(node, [BIN, "serve", "--listen", f"{node.ip}:{MANAGER_PORT}", "--data-dir", data,
                                     "--store", pg.url, "--no-grpc", "--config", path, "--log-format", "json",
                                     "--metrics-listen", f"{node.ip}:{METRICS_PORT}"],
                              os.path.join(tmp, f"{node.name}.log"))
            self.processes[node.name] = process
            process.wait_for_log(r"listening on https://", 90)
        with open(os.path.join(first, "admin.key")) as f:
            self.admin_key = f.read().strip()
        self.ca = os.path.join(first, "tls", "cert.pem")
        self.key = self.create_key(nodes[0], "load")["secret"]

    @staticmethod
    def cli(node, env, *args):
        """The offline CLI in `node`'s namespace (it reaches PostgreSQL there): its stdout."""
        done = subprocess.run(node.exec_args(BIN, *args), capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})
        if done.returncode != 0:
            raise RuntimeError(f"infergate {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def call(self, node, method, path, key, body=None, timeout=30):
        """One request from the client's node to replica `node`: (status, JSON body or None,
        seconds it took)."""
        def once():
            conn = tls_client.ManagerConnection(node.ip, MANAGER_PORT, self.ca, timeout)
            started = time.monotonic()
            try:
                status, _, raw = tls_client.request(conn, method, path, key=key, body=body)
            except OSError as e:
                return type(e).__name__, None, time.monotonic() - started
            finally:
                conn.close()
            try:
                decoded = json.loads(raw) if raw else None
            except ValueError:
                decoded = None
            return status, decoded, time.monotonic() - started
        return self.client.call(once, timeout=timeout + 5)

    def create_key(self, node, name, rate_limit=None):
        body = {"name": name, "scopes": ["infer"]}
        if rate_limit:
            body["rate_limit"] = rate_limit
        status, answer, _ = self.call(node, "POST", "/api/keys", self.admin_key, body)
        if status != 201 and status != 200:
            raise RuntimeError(f"creating key {name} on {node.name}: {status} {answer}")
        return answer

    def infer(self, node, key):
        """One inference on `node` with `key`: (status, error or None, seconds)."""
        body = tls_client.identity_body("probe", [1.0] * self.width)
        status, answer, took = self.call(node, "POST", f"/v2/models/{self.model}/infer", key, body)
        error = answer.get("error") if isinstance(answer, dict) else None
        return status, error, took

    def stop(self):
        for process in self.processes.values():
            process.stop()


def ready_for(replicas, node, key, timeout):
    """Until `node` answers an inference with `key` (the model fetched from PostgreSQL and
    loaded): the moment it did."""
    deadline = time.monotonic() + timeout
    while True:
        status, error, _ = replicas.infer(node, key)
        if status == 200:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise AssertionError(f"{node.name} does not serve the model within {timeout} s: {status} {error}")
        time.sleep(0.2)

