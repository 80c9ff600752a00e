"""Faults on a test network's links and processes, each something that is applied and undone:

- `Cut`: the node's link down at the bridge (`ip link set ... down`): its carrier is gone, as
  when a switch port or cable fails; undone by setting it up again.
- `Loss`, `Duplicate`: nftables `netdev` egress rules on the device that transmits in that
  direction (the node's own end for `out`, the bridge's end for `in`), `numgen random`, on
  IPv4 packets only: ARP passes, so that a one-way fault stays one way (a node whose ARP
  answers were lost could not receive either).
- `Delay`: delay, jitter, reordering (and loss) by [`delayer.py`](delayer.py) on an iptables
  NFQUEUE rule in the node's namespace (OUTPUT for `out`, PREROUTING for `in`). The kernels
  here have no `sch_netem`, so `tc netem` is not used.
- `Block`: nftables drops one kind of traffic (e.g. a worker's heartbeats to the manager's port
  while the manager's requests to it flow): asymmetric partitions.
- `Pause`: SIGSTOP, undone by SIGCONT.

Directions are the node's: `out` is what it sends, `in` what it receives, `both` is both.
"""
import itertools
import os
import signal
import subprocess
import sys
import time

from netns import sh

HERE = os.path.dirname(os.path.abspath(__file__))
DIRECTIONS = ("in", "out", "both")
_tables = itertools.count(1)


def _directions(direction):
    if direction not in DIRECTIONS:
        raise ValueError(f"direction '{direction}': one of {DIRECTIONS}")
    return ("in", "out") if direction == "both" else (direction,)


def _nft(ns, script):
    sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=script)


class Cut:
    def __init__(self, node):
        self.node = node

    def apply(self):
        self.node.network.bridge("link", "set", "dev", self.node.port, "down")

    def undo(self):
        self.node.network.bridge("link", "set", "dev", self.node.port, "up")


class _Egress:
    """An nftables netdev egress table per direction, on the device that transmits it."""

    def __init__(self, node, direction, statement):
        self.node = node
        self.tables = []
        for d in _directions(direction):
            ns, dev = (node.ns, node.dev) if d == "out" else (node.network.bridge_ns, node.port)
            self.tables.append((ns, dev, f"fault{next(_tables)}"))
        self.statement = statement

    def apply(self):
        for ns, dev, table in self.tables:
            statement = self.statement.replace("{dev}", dev)
            _nft(ns, f"""table netdev {table} {{
                chain egress {{ type filter hook egress device "{dev}" priority 0; {statement}; }}
            }}""")

    def undo(self):
        for ns, _, table in self.tables:
            sh("ip", "netns", "exec", ns, "nft", "delete", "table", "netdev", table, check=False)


def _chance(percent):
    """An nftables condition true for `percent` % of packets (to 0.01 %), empty for all."""
    if not 0 < percent <= 100:
        raise ValueError(f"percent {percent}: above 0, at most 100")
    return "" if percent == 100 else f"numgen random mod 10000 < {round(percent * 100)} "


class Loss(_Egress):
    def __init__(self, node, direction, percent):
        super().__init__(node, direction, f"meta protocol ip {_chance(percent)}drop")


class Duplicate(_Egress):
    # The copy passes the same egress hook again: marked, it is let through rather than copied
    # again (one copy per chosen packet, never a cascade).
    def __init__(self, node, direction, percent):
        super().__init__(node, direction, f'meta mark 0x1f accept; meta protocol ip {_chance(percent)}'
                                          f'meta mark set 0x1f dup to "{{dev}}"')


class Block:
    """Drops TCP between the node and `peer` on `port` (the port the peer listens on when
    `toward_peer`, else the node's own port): e.g. a worker's heartbeats to the manager."""

    def __init__(self, node, peer, port, toward_peer=True):
        self.node = node
        self.table = f"block{next(_tables)}"
        if toward_peer:
            out = f"ip daddr {peer.ip} tcp dport {port}"
            back = f"ip saddr {peer.ip} tcp sport {port}"
        else:
            out = f"ip daddr {peer.ip} tcp sport {port}"
            back = f"ip saddr {peer.ip} tcp dport {port}"
        self.rules = (out, back)

    def apply(self):
        out, back = self.rules
        _nft(self.node.ns, f"""table inet {self.table} {{
            chain out {{ type filter hook output priority 0; {out} drop; }}
            chain in {{ type filter hook input priority 0; {back} drop; }}
        }}""")

    def undo(self):
        sh("ip", "netns", "exec", self.node.ns, "nft", "delete", "table", "inet", self.table, check=False)


class Delay:
    """Each direction's packets through a delayer process on an NFQUEUE of their own."""

    _queues = itertools.count(1)

    def __init__(self, node, direction, delay_ms, jitter_ms=0.0, reorder_pct=0.0, loss_pct=0.0, seed=0):
        self.node = node
        self.options = ["--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms),
                        "--reorder-pct", str(reorder_pct), "--loss-pct", str(loss_pct)]
        self.seed = seed
        self.max_delay = (delay_ms + jitter_ms) / 1000
        self.rules = []
        for d in _directions(direction):
            chain, flag = ("OUTPUT", "-o") if d == "out" else ("PREROUTING", "-i")
            self.rules.append((next(self._queues), chain, flag))
        self.delayers = []

    def _rule(self, op, queue, chain, flag):
        return ["ip", "netns", "exec", self.node.ns, "iptables", "-t", "mangle", op, chain,
                flag, self.node.dev, "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]

    def apply(self):
        for queue, chain, flag in self.rules:
            proc = subprocess.Popen(
                self.node.exec_args(sys.executable, os.path.join(HERE, "delayer.py"), "--queue", str(queue),
                                    "--seed", str(self.seed + queue), *self.options),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.delayers.append(proc)
            line = proc.stdout.readline().strip()
            if line != "ready":
                proc.kill()
                raise RuntimeError(f"delayer on queue {queue} did not start: {line!r} {proc.stderr.read()[-500:]}")
            sh(*self._rule("-A", queue, chain, flag))

    def undo(self):
        for queue, chain, flag in self.rules:
            sh(*self._rule("-D", queue, chain, flag), check=False)
        # Packets it holds leave within the longest delay; it accepts the rest as it stops.
        time.sleep(self.max_delay)
        died = [proc for proc in self.delayers if proc.poll() is not None]
        for proc in self.delayers:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.delayers = []
        if died:
            # Its queue's packets then passed undelayed (--queue-bypass): the fault was not
            # what the schedule said.
            raise RuntimeError(f"a delayer stopped while its fault was applied: {died[0].stderr.read()[-500:]}")


class Pause:
    def __init__(self, process):
        self.process = process

    def apply(self):
        os.kill(self.process.pid, signal.SIGSTOP)

    def undo(self):
        os.kill(self.process.pid, signal.SIGCONT)
