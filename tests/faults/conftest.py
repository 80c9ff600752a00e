"""Fixtures of the fault tests: privileges checked first (a machine that cannot build test
networks fails the run, it is never skipped), leftovers of crashed runs removed, and every test
network removed after its test, whether it passed, failed or was interrupted."""
import atexit
import os
import shutil
import signal
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import netns  # noqa: E402
from cluster import BIN  # noqa: E402


def _remove_own():
    """Everything this process's runs made (namespaces, processes in them, temporary dirs)."""
    prefix = netns.run_prefix()
    for ns in netns.namespaces():
        if ns.startswith(prefix):
            netns.delete_namespace(ns)
    tmp = tempfile.gettempdir()
    for entry in os.listdir(tmp):
        if entry.startswith(prefix):
            shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)


def _terminated(signum, frame):
    # SIGTERM unwinds like Ctrl-C: pytest runs the fixtures' teardown, then atexit runs.
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def privileged():
    why = netns.missing_privileges()
    if why:
        pytest.fail(why, pytrace=False)
    removed = netns.sweep_leftovers()
    if removed:
        print(f"removed leftovers of earlier fault runs: {removed}")
    atexit.register(_remove_own)
    signal.signal(signal.SIGTERM, _terminated)


@pytest.fixture
def network(privileged):
    net = netns.Network()
    try:
        yield net
    finally:
        net.close()


@pytest.fixture(scope="session")
def infergate_bin():
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"no infergate binary at {BIN}: build it (cargo build) or set INFERGATE_BIN", pytrace=False)
    if not os.environ.get("ORT_DYLIB_PATH"):
        pytest.fail("ORT_DYLIB_PATH is not set: source .cache/env.sh (scripts/setup.sh writes it)", pytrace=False)
    return BIN
