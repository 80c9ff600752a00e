"""Plumbing shared by the `export_*.py` model exporters.

The setup script calls every exporter as `export_X.py --pkgs PKGS --out MODELS`. Each exporter
must be idempotent and must never leave a half-written model behind, because the gateway loads
whatever `.onnx` files it finds in MODELS. This module gives them:

- `Stamp`: a small JSON file next to the outputs recording the sha256 of every input and of the
  exporter's own code; an export is skipped when all outputs exist and the stamp still matches.
- `write_atomically`: temp file in the destination directory + fsync + rename, so readers see
  either the old file or the new one.
- `GraphBuilder`: collects nodes and initializers; every node has one output named like itself.
- `ExportError` + `run_main`: expected failures (missing package, unexpected weights, failed
  self-check) end the process with one clear line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper


class ExportError(Exception):
    """A failure the user can act on (bad input, wrong package version, failed self-check)."""


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--pkgs", type=Path, required=True, help="directory of unpacked pinned packages")
    parser.add_argument("--out", type=Path, required=True, help="directory the models are written to")
    parser.add_argument("--force", action="store_true", help="export even if the stamp is up to date")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def run_main(name: str, main: Callable[[], None]) -> None:
    """Runs an exporter's main, turning an ExportError into one stderr line and exit status 1."""
    try:
        main()
    except ExportError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        sys.exit(1)


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ExportError(f"{what} not found at {path} (did scripts/setup.sh fetch the pinned packages?)")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Stamp:
    """Records what a set of outputs was built from, so an unchanged export can be skipped.

    The code hashed is the exporter script plus this module: a change to either re-exports.
    """

    def __init__(self, out_dir: Path, name: str, inputs: Iterable[Path], script: Path):
        self.path = out_dir / f".{name}.stamp"
        code = [Path(script).resolve(), Path(__file__).resolve()]
        self.content = {
            "inputs": {p.name: sha256_file(p) for p in inputs},
            "code": {p.name: sha256_file(p) for p in code},
        }

    def is_current(self, outputs: Iterable[Path]) -> bool:
        if not all(p.is_file() for p in outputs):
            return False
        try:
            return json.loads(self.path.read_text()) == self.content
        except (OSError, ValueError):
            return False

    def record(self) -> None:
        write_atomically(self.path, (json.dumps(self.content, indent=1, sort_keys=True) + "\n").encode())


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to `path` so that a reader never sees a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_and_serialize(model: onnx.ModelProto) -> bytes:
    """Runs the ONNX checker (with shape inference) and returns the serialized model."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as err:
        raise ExportError(f"the built graph fails the ONNX checker: {err}") from err
    return model.SerializeToString()


def set_metadata(model: onnx.ModelProto, **entries: str) -> None:
    """Adds model metadata (readable from ORT's ModelMetadata.custom_metadata_map)."""
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key = key
        prop.value = value


class GraphBuilder:
    """Collects the nodes and weights of a graph; each node's single output is named after it."""

    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name
