"""bench/floor/floor_server.rs in its batching mode, which bench/http_floor.py measures as
the floor under the MLP's batched figure: an inference is held until its batch closes (full, or
its delay ran out) and only then answered, with either batch clock. Without that, the floor
would measure a server answering at once and understate what batching costs."""
import concurrent.futures
import http.client
import os
import ssl
import subprocess

import pytest

from conftest import BIN

FLOOR_SERVER = os.path.join(os.path.dirname(BIN), "examples", "floor_server")
# Never reached in these tests: a batch that closes at all closes because it filled up.
FOREVER_US = 600_000_000


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    """A certificate and key as `infergate serve` writes them on its first start."""
    data = str(tmp_path_factory.mktemp("infergate-floor"))
    proc = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--no-grpc", "--data-dir", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "listening on" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    yield os.path.join(data, "tls")


@pytest.fixture
def floor(tls_dir, tmp_path):
    """Starts the floor server with the given batching arguments; yields a function that does."""
    if not os.access(FLOOR_SERVER, os.X_OK):
        pytest.fail(f"{FLOOR_SERVER} is not built (`cargo test` builds the examples)")
    answer = tmp_path / "answer"
    answer.write_bytes(b'{"outputs": []}')
    index = tmp_path / "index.txt"
    index.write_text(f"/v2/models/m/infer\t{answer}\tapplication/json\t-\n")
    procs = []

    def start(*numbers, clock):
        proc = subprocess.Popen([FLOOR_SERVER, "0", os.path.join(tls_dir, "cert.pem"),
                                 os.path.join(tls_dir, "key.pem"), str(index), *map(str, numbers), clock],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stderr.readline().strip() == "listening"
        return int(proc.stdout.readline().split()[-1])

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def infer(port, tls_dir, timeout=30):
    context = ssl.create_default_context(cafile=os.path.join(tls_dir, "cert.pem"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    try:
        conn.request("POST", "/v2/models/m/infer", body=b"{}")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("clock", ["thread", "timerfd"])
def test_a_batch_answers_only_once_full(floor, tls_dir, clock):
    port = floor(0, FOREVER_US, 2, clock=clock)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(infer, port, tls_dir)
        # Alone in its batch, the first request is held (its batch would close in 10 minutes).
        with pytest.raises(concurrent.futures.TimeoutError):
            first.result(timeout=1.0)
        second = pool.submit(infer, port, tls_dir)
        assert second.result(timeout=30) == (200, b'{"outputs": []}')
        assert first.result(timeout=30) == (200, b'{"outputs": []}')


@pytest.mark.parametrize("clock", ["thread", "timerfd"])
def test_a_lone_request_is_answered_when_its_delay_runs_out(floor, tls_dir, clock):
    port = floor(0, 2000, 16, clock=clock)
    for _ in range(3):
        assert infer(port, tls_dir) == (200, b'{"outputs": []}')
