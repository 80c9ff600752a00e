"""Fixtures that start the real infergate binary for the Python client tests."""
import os
import re
import shutil
import subprocess
import tempfile
import threading
import queue

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "debug", "infergate"))
MODELS = os.environ.get("INFERGATE_MODELS", os.path.join(ROOT, ".cache", "models"))


class Gateway:
    def __init__(self, data, insecure=False, extra_args=()):
        self.data = data
        grpc = "--no-grpc" not in extra_args
        args = [BIN, "serve", "--listen", "127.0.0.1:0", "--data-dir", data, *extra_args]
        if grpc:
            args += ["--grpc-listen", "127.0.0.1:0"]
        if insecure:
            args.append("--insecure-http")
        self.startup_log = []
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        self.lines = lines
        threading.Thread(target=lambda: [lines.put(l) for l in self.proc.stderr], daemon=True).start()
        self.hostport = None
        # gRPC's address (host:port) when it serves; its line follows the HTTP one.
        self.grpc_hostport = None
        while self.hostport is None or (grpc and self.grpc_hostport is None):
            line = re.sub(r"\x1b\[[0-9;]*m", "", lines.get(timeout=60))
            self.startup_log.append(line)
            m = re.search(r"(grpc )?listening on (https?)://([^\s\"]+)", line)
            if m and m.group(1):
                self.grpc_hostport = m.group(3)
            elif m:
                self.scheme, self.hostport = m.group(2), m.group(3)
        with open(os.path.join(data, "admin.key")) as f:
            self.admin_key = f.read().strip()
        self.cert = os.path.join(data, "tls", "cert.pem")

    @property
    def url(self):
        return f"{self.scheme}://{self.hostport}"

    def key(self, scopes="infer", *flags):
        out = subprocess.run([BIN, "keys", "create", "--scope", scopes, "--data-dir", self.data, *flags],
                             check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        # Each data directory holds copies of the models (about 100 MB); a run leaving them
        # behind filled a CI machine's disk. INFERGATE_KEEP_DATA=1 keeps them to look at.
        if not os.environ.get("INFERGATE_KEEP_DATA"):
            shutil.rmtree(self.data, ignore_errors=True)


def register(data, name, file):
    subprocess.run([BIN, "models", "add", "--data-dir", data, "--name", name, os.path.join(MODELS, file)],
                   check=True, capture_output=True)


def start(models, insecure=False, extra_args=()):
    data = tempfile.mkdtemp(prefix="infergate-py-")
    for name, file in models:
        register(data, name, file)
    return Gateway(data, insecure=insecure, extra_args=extra_args)


@pytest.fixture(scope="module")
def gateway():
    g = start([("minilm", "minilm.onnx"), ("ocr-rec", "ocr-rec.onnx"), ("cls", "ocr-cls.onnx")])
    yield g
    g.stop()


@pytest.fixture(scope="module")
def plain_gateway():
    g = start([("cls", "ocr-cls.onnx")], insecure=True)
    yield g
    g.stop()
