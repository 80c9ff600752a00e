"""The fault harness itself, without infergate: each fault does what it says on a two-node test
network and is undone, and nothing outlives a run. Times are only ever lower bounds (a delayed
packet cannot arrive early), so a slow machine cannot fail these."""
import os
import socket
import subprocess
import threading
import time

import pytest

import impair
import netns
from schedule import Fault, Faults, Run, Schedule


def serve_tcp(node, port):
    """An echo server on `node`:`port`, on a daemon thread; its listening socket."""
    listener = node.call(socket.create_server, (node.ip, port))

    def echo(conn):
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    return listener


def connect(client, server, port, timeout=1.0):
    """A TCP connection from `client` to `server`, or the error that stopped it."""
    try:
        return client.call(socket.create_connection, (server.ip, port), timeout)
    except OSError as e:
        return e


def round_trip(sock):
    started = time.monotonic()
    sock.sendall(b"x")
    assert sock.recv(1) == b"x"
    return time.monotonic() - started


def udp_received(sender, receiver, count, port=9999):
    """Sends `count` numbered datagrams from `sender` to `receiver`: how many arrived, and
    how many of them more than once."""
    rx = receiver.call(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((receiver.ip, port))
    rx.settimeout(0.5)
    tx = sender.call(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(count):
        tx.sendto(str(i).encode(), (receiver.ip, port))
        time.sleep(0.001)
    seen = []
    try:
        while True:
            seen.append(rx.recv(64))
    except socket.timeout:
        pass
    rx.close()
    tx.close()
    return len(set(seen)), len(seen) - len(set(seen))


@pytest.fixture
def pair(network):
    a, b = network.add("a"), network.add("b")
    network.wait_connected()
    return a, b


def test_nodes_reach_each_other_and_nothing_lands_in_the_machines_own_namespace(network, pair):
    a, b = pair
    serve_tcp(b, 7000)
    conn = connect(a, b, 7000)
    assert not isinstance(conn, Exception), conn
    round_trip(conn)
    conn.close()
    own = netns.sh("ip", "-o", "addr", "show")
    assert netns.SUBNET not in own, "test addresses stay inside the namespaces"
    assert not any(n.port in netns.sh("ip", "-o", "link", "show").split() for n in pair)


def test_a_cut_link_carries_nothing_until_healed(network, pair):
    a, b = pair
    serve_tcp(b, 7000)
    cut = impair.Cut(b)
    cut.apply()
    assert isinstance(connect(a, b, 7000), OSError), "no connection through a cut link"
    cut.undo()
    deadline = time.monotonic() + 10
    while isinstance(conn := connect(a, b, 7000), OSError):
        assert time.monotonic() < deadline, f"still unreachable after the heal: {conn}"
    round_trip(conn)
    conn.close()


@pytest.mark.parametrize("direction,factor", [("in", 1), ("out", 1), ("both", 2)])
def test_a_delay_holds_the_packets_of_its_direction(network, pair, direction, factor):
    a, b = pair
    serve_tcp(b, 7000)
    conn = connect(a, b, 7000)
    delay = impair.Delay(b, direction, delay_ms=150)
    delay.apply()
    try:
        rtts = [round_trip(conn) for _ in range(3)]
    finally:
        delay.undo()
    assert min(rtts) >= factor * 0.150, rtts
    assert "NFQUEUE" not in netns.sh("ip", "netns", "exec", b.ns, "iptables", "-t", "mangle", "-S")
    assert all(p.poll() is not None for p in delay.delayers) and not delay.delayers
    round_trip(conn)
    conn.close()


def test_loss_and_duplication_apply_per_direction_and_are_undone(network, pair):
    a, b = pair
    lost = impair.Loss(a, "out", 100)
    lost.apply()
    assert udp_received(a, b, 50) == (0, 0)
    assert udp_received(b, a, 50)[0] == 50, "the other direction is untouched"
    lost.undo()
    assert udp_received(a, b, 50)[0] == 50

    twice = impair.Duplicate(b, "in", 100)
    twice.apply()
    arrived, duplicated = udp_received(a, b, 50)
    twice.undo()
    assert (arrived, duplicated) == (50, 50), "each packet copied once"
    assert udp_received(a, b, 50) == (50, 0)


def test_a_block_drops_one_port_and_leaves_the_others(network, pair):
    a, b = pair
    serve_tcp(b, 7000)
    serve_tcp(b, 7001)
    block = impair.Block(a, b, 7000)
    block.apply()
    assert isinstance(connect(a, b, 7000), OSError)
    other = connect(a, b, 7001)
    assert not isinstance(other, Exception), other
    other.close()
    block.undo()
    conn = connect(a, b, 7000)
    assert not isinstance(conn, Exception), conn
    conn.close()


def test_a_pause_stops_a_process_until_resumed(network, pair):
    a, _ = pair
    proc = subprocess.Popen(a.exec_args("sleep", "60"))
    try:
        state = lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0]
        pause = impair.Pause(proc)
        pause.apply()
        deadline = time.monotonic() + 5
        while state() != "T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        pause.undo()
        while state() == "T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()


def test_a_schedule_undoes_what_it_applied_when_stopped_early(network, pair):
    a, b = pair
    serve_tcp(b, 7000)
    schedule = Schedule(seed=7, faults=[Fault("cut", "b", at=0.0, duration=600.0)])
    assert '"seed": 7' in schedule.describe() and '"kind": "cut"' in schedule.describe()
    run = Run(schedule, Faults(network)).start()
    deadline = time.monotonic() + 10
    while 0 not in run.applied:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert isinstance(connect(a, b, 7000), OSError)
    run.stop()
    assert 0 in run.undone
    assert "state UP" in netns.sh("ip", "-n", network.bridge_ns, "link", "show", "dev", "b")


def test_leftovers_of_a_run_whose_process_is_gone_are_removed(privileged):
    dead = subprocess.Popen(["true"])
    dead.wait()
    crashed = netns.Network(prefix=netns.run_prefix(dead.pid) + "1-")
    node = crashed.add("x")
    sleeper = subprocess.Popen(node.exec_args("sleep", "600"))
    live = netns.Network()
    try:
        removed = netns.sweep_leftovers()
        assert crashed.bridge_ns in removed and node.ns in removed and crashed.tmp in removed
        assert sleeper.wait(timeout=10) != 0, "its process was killed"
        assert not any(ns.startswith(crashed.prefix) for ns in netns.namespaces())
        assert not os.path.exists(crashed.tmp)
        assert live.bridge_ns in netns.namespaces(), "a live run's network is left alone"
    finally:
        live.close()
        crashed.close()
    assert not any(ns.startswith(live.prefix) for ns in netns.namespaces())
    assert not os.path.exists(live.tmp)
