"""Network namespaces for fault tests: one namespace per process of a cluster, each joined by a
veth pair to a bridge in a namespace of its own, with addresses in a private range that exist
inside those namespaces only. Nothing here touches the machine's own interfaces, addresses or
routes: every command runs in a namespace this run created (`ip -n NS`, `ip netns exec NS`).

Names carry the run's prefix, `igf<pid>-`: a later run removes what a crashed run left (its
namespaces, the processes still in them, its temporary directories) once that pid is gone, and
never touches a live run's.
"""
import concurrent.futures
import ctypes
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

PREFIX = "igf"
# The test network, inside the namespaces only (RFC 1918).
SUBNET = "10.88.0"
# The interface a node sees; its peer in the bridge namespace is named after the node.
NODE_DEV = "eth0"
BRIDGE = "br0"
_CLONE_NEWNET = 0x40000000
_OWNER = re.compile(rf"^{PREFIX}(\d+)-")
_networks = itertools.count(1)


class CommandFailed(RuntimeError):
    pass


def sh(*args, timeout=30, check=True, input=None):
    """Runs a command (no shell), its stdout; a failure raises with the command and its stderr."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input)
    if check and done.returncode != 0:
        raise CommandFailed(f"{' '.join(args)} -> exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def run_prefix(pid=None):
    return f"{PREFIX}{pid if pid is not None else os.getpid()}-"


def missing_privileges():
    """Why this process cannot build test networks, or None. Checked by creating and deleting a
    namespace, a veth pair, an nftables table and an iptables rule in it: a missing tool or
    capability is named, never skipped over."""
    if os.geteuid() != 0:
        return "fault tests need root (network namespaces, veth pairs, nftables): run them as root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f"fault tests need `{tool}` (Debian package {package}; scripts/setup.sh installs it)"
    probe = f"{run_prefix()}probe"
    try:
        sh("ip", "netns", "add", probe)
        sh("ip", "-n", probe, "link", "add", "name", "p0", "type", "veth", "peer", "name", "p1")
        sh("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe")
        sh("ip", "netns", "exec", probe, "iptables", "-A", "OUTPUT", "-o", "p0", "-j", "NFQUEUE",
           "--queue-num", "1", "--queue-bypass")
    except (CommandFailed, OSError) as e:
        return f"cannot build a test network here: {e}"
    finally:
        sh("ip", "netns", "del", probe, check=False)
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces():
    """Names of the machine's named network namespaces."""
    return [line.split()[0] for line in sh("ip", "netns", "list").splitlines() if line.strip()]


def delete_namespace(ns):
    """Kills every process left in `ns` (they were started in it by a fault run), then deletes it."""
    for pid in sh("ip", "netns", "pids", ns, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    sh("ip", "netns", "del", ns, check=False)


def sweep_leftovers():
    """Removes what runs whose process is gone left behind: namespaces (and processes in them)
    and temporary directories named with their prefix. Returns what was removed."""
    removed = []
    for ns in namespaces():
        m = _OWNER.match(ns)
        if m and not _alive(int(m.group(1))):
            delete_namespace(ns)
            removed.append(ns)
    tmp = tempfile.gettempdir()
    for entry in os.listdir(tmp):
        m = _OWNER.match(entry)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)
            removed.append(os.path.join(tmp, entry))
    return removed


def enter(ns):
    """Moves the calling thread (only it) into namespace `ns`: the sockets it opens live there."""
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


class Node:
    """One host of the test network: its namespace, address and the two ends of its link."""

    def __init__(self, network, name, ip):
        self.network = network
        self.name = name
        self.ns = f"{network.prefix}{name}"
        self.ip = ip
        # The link's end in the node and its end on the bridge (named after the node).
        self.dev = NODE_DEV
        self.port = name
        self._executor = None

    def __repr__(self):
        return f"{self.name}({self.ip})"

    def exec_args(self, *argv):
        return ["ip", "netns", "exec", self.ns, *argv]

    def call(self, fn, *args, timeout=60):
        """Runs `fn(*args)` on a thread inside this node's namespace (sockets it opens are the
        node's), waiting at most `timeout` seconds."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix=self.ns, initializer=enter, initargs=(self.ns,))
        return self._executor.submit(fn, *args).result(timeout=timeout)

    def close(self):
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class Network:
    """A bridge in its own namespace and nodes joined to it. `close()` removes all of it (and
    every process still in its namespaces); use it as a context manager."""

    def __init__(self, prefix=None):
        # Unique per network, so that one process may hold several.
        self.prefix = prefix or f"{run_prefix()}{next(_networks)}-"
        self.bridge_ns = f"{self.prefix}net"
        self.nodes = {}
        self.tmp = tempfile.mkdtemp(prefix=self.prefix)
        sh("ip", "netns", "add", self.bridge_ns)
        self.bridge("link", "add", "name", BRIDGE, "type", "bridge")
        self.bridge("link", "set", "dev", BRIDGE, "up")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def bridge(self, *args):
        """`ip` in the bridge's namespace."""
        return sh("ip", "-n", self.bridge_ns, *args)

    def add(self, name):
        """A new node on the bridge, with the next address."""
        if len(name) > 15 or not re.fullmatch(r"[a-z][a-z0-9]*", name):
            raise ValueError(f"node name '{name}': lowercase letters and digits, at most 15")
        ip = f"{SUBNET}.{len(self.nodes) + 1}"
        node = Node(self, name, ip)
        sh("ip", "netns", "add", node.ns)
        # Both ends are made inside the namespaces: nothing appears in the machine's own.
        sh("ip", "-n", node.ns, "link", "add", "name", node.dev, "type", "veth",
           "peer", "name", node.port, "netns", self.bridge_ns)
        sh("ip", "-n", node.ns, "addr", "add", f"{ip}/24", "dev", node.dev)
        sh("ip", "-n", node.ns, "link", "set", "dev", node.dev, "up")
        sh("ip", "-n", node.ns, "link", "set", "dev", "lo", "up")
        self.bridge("link", "set", "dev", node.port, "master", BRIDGE, "up")
        self.nodes[name] = node
        return node

    def wait_connected(self, timeout=10):
        """Until every node's link is up on both ends (a veth reports carrier at once; the bridge
        port needs a moment to forward)."""
        deadline = time.monotonic() + timeout
        while True:
            down = [n.name for n in self.nodes.values()
                    if "forwarding" not in sh("ip", "-n", self.bridge_ns, "-d", "link", "show", "dev", n.port)]
            if not down:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"bridge ports not forwarding within {timeout} s: {down}")
            time.sleep(0.05)

    def close(self):
        for node in self.nodes.values():
            node.close()
            delete_namespace(node.ns)
        delete_namespace(self.bridge_ns)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.nodes = {}
