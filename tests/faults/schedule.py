"""A fault schedule is data: what, between whom, when and for how long, with the seed that
chose its random parts. It is printed before it runs (`INFERGATE_FAULTS_SEED=N` replays a run's
random choices), run on a thread of its own against a `Faults` that makes each event's
impairment, and every fault it applied is undone when it ends, fails or is interrupted.
"""
import dataclasses
import json
import os
import random
import threading
import time

import impair


def seed_from_env():
    """The seed to use: `INFERGATE_FAULTS_SEED` to replay a run, else a fresh one."""
    given = os.environ.get("INFERGATE_FAULTS_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 32)


@dataclasses.dataclass(frozen=True)
class Fault:
    """`kind` (cut, loss, duplicate, delay, block, pause) on `node` from `at` seconds after the
    schedule starts, for `duration` seconds; `params` are the kind's (direction, percent,
    delay_ms, jitter_ms, reorder_pct, peer, port...)."""
    kind: str
    node: str
    at: float
    duration: float
    params: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Schedule:
    seed: int
    faults: list

    def describe(self):
        return json.dumps({"seed": self.seed, "faults": [dataclasses.asdict(f) for f in self.faults]})

    def length(self):
        return max((f.at + f.duration for f in self.faults), default=0.0)


class Faults:
    """Makes the impairment a `Fault` names, on a network's nodes and the cluster's processes."""

    def __init__(self, network, processes=None, seed=0):
        self.network = network
        self.processes = processes or {}
        self.seed = seed

    def make(self, fault):
        node = self.network.nodes[fault.node]
        p = fault.params
        if fault.kind == "cut":
            return impair.Cut(node)
        if fault.kind == "loss":
            return impair.Loss(node, p.get("direction", "both"), p["percent"])
        if fault.kind == "duplicate":
            return impair.Duplicate(node, p.get("direction", "both"), p["percent"])
        if fault.kind == "delay":
            return impair.Delay(node, p.get("direction", "both"), p["delay_ms"], p.get("jitter_ms", 0.0),
                                p.get("reorder_pct", 0.0), p.get("loss_pct", 0.0), seed=self.seed)
        if fault.kind == "block":
            return impair.Block(node, self.network.nodes[p["peer"]], p["port"], p.get("toward_peer", True))
        if fault.kind == "pause":
            return impair.Pause(self.processes[fault.node])
        raise ValueError(f"unknown fault kind '{fault.kind}'")


class Run:
    """A schedule running on its own thread. `applied`/`undone` hold the monotonic times each
    fault was applied and undone (by index), for the report."""

    def __init__(self, schedule, faults):
        self.schedule = schedule
        self.faults = faults
        self.applied = {}
        # When each fault's undoing began (it may take a while: a delayer lets its held packets
        # go), and when it was done.
        self.undoing = {}
        self.undone = {}
        self.error = None
        self._active = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fault-schedule", daemon=True)

    def start(self):
        print(f"fault schedule: {self.schedule.describe()}", flush=True)
        self.started = time.monotonic()
        self._thread.start()
        return self

    def _run(self):
        steps = []
        for i, f in enumerate(self.schedule.faults):
            steps.append((f.at, 1, i, "apply"))
            steps.append((f.at + f.duration, 0, i, "undo"))
        try:
            for at, _, i, what in sorted(steps):
                if self._stop.wait(max(0.0, self.started + at - time.monotonic())):
                    return
                with self._lock:
                    if what == "apply":
                        made = self.faults.make(self.schedule.faults[i])
                        made.apply()
                        self._active[i] = made
                        self.applied[i] = time.monotonic()
                    elif i in self._active:
                        self.undoing[i] = time.monotonic()
                        self._active.pop(i).undo()
                        self.undone[i] = time.monotonic()
        except Exception as e:  # reported by wait(); the faults are undone by stop()
            self.error = e

    def wait_applied(self, index, timeout):
        """The moment fault `index` was applied, waiting at most `timeout` s for it."""
        deadline = time.monotonic() + timeout
        while index not in self.applied:
            if self.error:
                raise self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"fault {index} not applied within {timeout:.1f} s")
            time.sleep(0.01)
        return self.applied[index]

    def wait(self, timeout):
        """Until the schedule has run through (at most `timeout` s); a fault that failed raises."""
        self._thread.join(timeout)
        if self.error:
            raise self.error
        if self._thread.is_alive():
            raise TimeoutError(f"the fault schedule did not finish within {timeout:.1f} s")

    def stop(self):
        """Ends the schedule and undoes every fault still applied (idempotent)."""
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            for i, made in list(self._active.items()):
                made.undo()
                self.undone[i] = time.monotonic()
            self._active.clear()
