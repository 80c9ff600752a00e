#!/usr/bin/env python3
"""Exports textgenrnn's default character model (textgenrnn==2.0.0) from Keras HDF5 to ONNX.

The Keras model (textgenrnn/model.py, default config):
    input [b, 40] char indices -> Embedding(465, 100)
    -> LSTM(128, return_sequences) -> LSTM(128, return_sequences)
    -> concat(embedding, lstm1, lstm2) [b, 40, 356]
    -> AttentionWeightedAverage (softmax over time of x.W, weighted sum) [b, 356]
    -> Dense(465, softmax)

Outputs:
  MODELS/textgen.onnx
    input  `input`          int64   [batch, 40]  char indices, left-padded with 0
    output `probabilities`  float32 [batch, 465] next-character distribution (index 0 = padding)
  MODELS/textgen-vocab.json (format `infergate-textgen-vocab/1`, see `vocab_document`)

The LSTM weights were saved from a CuDNNLSTM (bias of 8*units: input and recurrent biases kept
apart, kernels in cuDNN's per-gate layout). Keras converts them when loading into a plain LSTM
(`_convert_rnn_weights`); `load_keras_weights` does the same conversion, so the weights it returns
are those of the CPU Keras model textgenrnn runs, with sigmoid recurrent activation.

`--sample SEED` additionally generates text from the exported model with onnxruntime and prints
the time per character (batch 1), as a demonstration and a quick benchmark.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import onnx
import onnxruntime as ort
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

PACKAGE_DIR = "textgenrnn/textgenrnn"
MODEL_OUTPUT = "textgen.onnx"
VOCAB_OUTPUT = "textgen-vocab.json"
VOCAB_FORMAT = "infergate-textgen-vocab/1"
MAX_LENGTH = 40
META_TOKEN = "<s>"
KERAS_EPSILON = 1e-7  # K.epsilon(), added to the attention softmax denominator
OPSET = 17
IR_VERSION = 8


@dataclass
class KerasWeights:
    """Weights of the Keras model, in Keras LSTM layout (gate order i, f, c, o)."""

    embedding: np.ndarray  # [vocab, 100]
    lstm: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (kernel [in, 4u], recurrent [u, 4u], bias [4u])
    attention: np.ndarray  # [356, 1]
    dense_kernel: np.ndarray  # [356, vocab]
    dense_bias: np.ndarray  # [vocab]


def _cudnn_to_keras_lstm(kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray):
    """Keras' CuDNNLSTM -> LSTM weight conversion.

    Per gate, cuDNN keeps the input matrix as [units, input] row-major in the memory of a
    [input, units] Keras variable, and the recurrent matrix transposed; the two bias halves add.
    """
    units = recurrent.shape[0]
    in_gates = np.hsplit(kernel, 4)
    kernel = np.hstack([g.reshape(-1).reshape(units, kernel.shape[0]).T for g in in_gates])
    recurrent = np.hstack([g.T for g in np.hsplit(recurrent, 4)])
    bias = bias[: 4 * units] + bias[4 * units :]
    return kernel, recurrent, bias


def load_keras_weights(path: Path) -> KerasWeights:
    def layer(f, name):
        group = f[name][name]
        return {k.split(":")[0]: np.asarray(v, dtype=np.float32) for k, v in group.items()}

    try:
        with h5py.File(path, "r") as f:
            embedding = layer(f, "embedding")["embeddings"]
            lstm = []
            for name in ("rnn_1", "rnn_2"):
                w = layer(f, name)
                units = w["recurrent_kernel"].shape[0]
                if w["bias"].shape == (8 * units,):
                    lstm.append(_cudnn_to_keras_lstm(w["kernel"], w["recurrent_kernel"], w["bias"]))
                elif w["bias"].shape == (4 * units,):
                    lstm.append((w["kernel"], w["recurrent_kernel"], w["bias"]))
                else:
                    raise ExportError(f"{path}: {name} has an unexpected bias shape {w['bias'].shape}")
            attention = layer(f, "attention")["attention_W"]
            dense = layer(f, "output")
    except (OSError, KeyError) as err:
        raise ExportError(f"cannot read textgenrnn weights from {path}: {err}") from err
    return KerasWeights(embedding, lstm, attention, dense["kernel"], dense["bias"])


def load_vocab(path: Path, num_classes: int) -> list[str]:
    """textgenrnn_vocab.json maps char -> index 1..N; index 0 is padding / unknown."""
    try:
        char_to_index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ExportError(f"cannot read {path}: {err}") from err
    tokens = [""] * (len(char_to_index) + 1)
    for char, index in char_to_index.items():
        if not 1 <= index < len(tokens) or tokens[index]:
            raise ExportError(f"{path}: index {index} of {char!r} is out of range or duplicated")
        tokens[index] = char
    if len(tokens) != num_classes:
        raise ExportError(f"{path} has {len(tokens)} classes with padding, the weights have {num_classes}")
    if META_TOKEN not in char_to_index:
        raise ExportError(f"{path} lacks the meta token {META_TOKEN!r}")
    return tokens


def vocab_document(tokens: list[str]) -> dict:
    """The vocabulary file the gateway reads. `tokens[i]` is the text of class i.

    Encoding a prompt: start with the meta token, then one token per character; characters not
    in the vocabulary map to `unknown_index` (0, as textgenrnn does); keep the last `max_length`
    indices and left-pad with `padding_index` to exactly `max_length`. Generation stops when the
    model emits the meta token; `padding_index` should never be sampled (textgenrnn takes the
    second most likely class instead).
    """
    return {
        "format": VOCAB_FORMAT,
        "max_length": MAX_LENGTH,
        "padding_index": 0,
        "unknown_index": 0,
        "meta_token": META_TOKEN,
        "meta_index": tokens.index(META_TOKEN),
        "tokens": tokens,
    }


def iofc(m: np.ndarray) -> np.ndarray:
    """Reorders the gate blocks of the last axis from Keras' i, f, c, o to ONNX's i, o, f, c."""
    i, f, c, o = np.split(m, 4, axis=-1)
    return np.concatenate([i, o, f, c], axis=-1)


def build_model(w: KerasWeights) -> onnx.ModelProto:
    vocab = w.embedding.shape[0]
    g = GraphBuilder()
    const, node = g.const, g.node

    emb = node("Gather", [const("embedding.weight", w.embedding), "input"], "embedded", axis=0)
    # ONNX LSTM wants time-major input [seq, batch, features].
    x = node("Transpose", [emb], "embedded_tm", perm=[1, 0, 2])
    features = [x]
    for n, (kernel, recurrent, bias) in enumerate(w.lstm, start=1):
        units = recurrent.shape[0]
        onnx_w = iofc(kernel).T[None]  # [1, 4u, in]
        onnx_r = iofc(recurrent).T[None]  # [1, 4u, u]
        onnx_b = np.concatenate([iofc(bias), np.zeros(4 * units, np.float32)])[None]  # [1, 8u]
        y = f"rnn_{n}"
        lstm_inputs = [x, const(f"{y}.W", onnx_w), const(f"{y}.R", onnx_r), const(f"{y}.B", onnx_b)]
        node("LSTM", lstm_inputs, y, hidden_size=units)  # Y: [seq, 1 direction, batch, units]
        x = node("Squeeze", [y, const(f"{y}.dir_axis", np.array([1], np.int64))], f"{y}.out")
        features.append(x)
    seq = node("Concat", features, "rnn_concat", axis=2)  # [seq, batch, 356]

    # AttentionWeightedAverage: softmax over time of seq.W (max trick, K.epsilon in the sum).
    time_axis = const("time_axis", np.array([0], np.int64))
    logits = node("MatMul", [seq, const("attention.W", w.attention)], "attention.logits")  # [seq, b, 1]
    peak = node("ReduceMax", [logits], "attention.max", axes=[0], keepdims=1)
    ai = node("Exp", [node("Sub", [logits, peak], "attention.shifted")], "attention.exp")
    total = node("ReduceSum", [ai, time_axis], "attention.sum", keepdims=1)
    total = node("Add", [total, const("keras_epsilon", np.array(KERAS_EPSILON, np.float32))], "attention.denom")
    weights = node("Div", [ai, total], "attention.weights")
    pooled = node("ReduceSum", [node("Mul", [seq, weights], "attention.weighted"), time_axis], "attention", keepdims=0)

    dense = node("Gemm", [pooled, const("output.kernel", w.dense_kernel), const("output.bias", w.dense_bias)], "logits")
    node("Softmax", [dense], "probabilities", axis=-1)

    graph = helper.make_graph(
        g.nodes,
        "textgenrnn",
        [helper.make_tensor_value_info("input", TensorProto.INT64, ["batch", MAX_LENGTH])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", vocab])],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="infergate/scripts/export_textgen.py",
        doc_string=f"textgenrnn default char model; input: {MAX_LENGTH} char indices, left-padded with 0",
    )
    model.ir_version = IR_VERSION
    set_metadata(model, vocab_file=VOCAB_OUTPUT, max_length=str(MAX_LENGTH), source="textgenrnn==2.0.0")
    return model


def encode(text_tokens: list[str], char_to_index: dict[str, int]) -> np.ndarray:
    """One [1, MAX_LENGTH] row as textgenrnn_encode_sequence builds it."""
    ids = [char_to_index.get(t, 0) for t in text_tokens[-MAX_LENGTH:]]
    return np.array([[0] * (MAX_LENGTH - len(ids)) + ids], dtype=np.int64)


def sample(model_path: Path, tokens: list[str], seed: str, chars: int, temperature: float, rng_seed: int = 0):
    """Generates `chars` characters after `seed`; returns (text, seconds per character)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    char_to_index = {t: i for i, t in enumerate(tokens) if i}
    rng = np.random.default_rng(rng_seed)
    text = [META_TOKEN] + list(seed)
    start = time.perf_counter()
    for _ in range(chars):
        (probs,) = session.run(["probabilities"], {"input": encode(text, char_to_index)})
        p = probs[0].astype(np.float64)
        if temperature == 0:
            index = int(np.argmax(p[1:])) + 1
        else:
            p = np.exp(np.log(p + KERAS_EPSILON) / temperature)
            p[0] = 0.0
            index = int(rng.choice(len(p), p=p / p.sum()))
        if tokens[index] == META_TOKEN:
            break
        text.append(tokens[index])
    elapsed = time.perf_counter() - start
    generated = len(text) - 1 - len(seed)
    return "".join(text[1:]), elapsed / max(generated, 1)


def main() -> None:
    def extra(parser):
        parser.add_argument("--sample", metavar="SEED", help="after exporting, generate text from SEED")
        parser.add_argument("--chars", type=int, default=100, help="characters to generate with --sample")
        parser.add_argument("--temperature", type=float, default=0.5, help="0 = greedy")

    args = parse_args("Export textgenrnn's default model to ONNX (h5py + onnx).", extra)
    package = args.pkgs / PACKAGE_DIR
    weights_path = require_file(package / "textgenrnn_weights.hdf5", "textgenrnn weights")
    vocab_path = require_file(package / "textgenrnn_vocab.json", "textgenrnn vocabulary")
    model_out, vocab_out = args.out / MODEL_OUTPUT, args.out / VOCAB_OUTPUT
    stamp = Stamp(args.out, "textgen", [weights_path, vocab_path], Path(__file__))
    if not args.force and stamp.is_current([model_out, vocab_out]):
        print(f"export_textgen: {model_out} and {vocab_out} are up to date")
    else:
        weights = load_keras_weights(weights_path)
        tokens = load_vocab(vocab_path, weights.embedding.shape[0])
        vocab_json = json.dumps(vocab_document(tokens), ensure_ascii=False, indent=1) + "\n"
        write_atomically(model_out, check_and_serialize(build_model(weights)))
        write_atomically(vocab_out, vocab_json.encode("utf-8"))
        stamp.record()
        print(f"export_textgen: wrote {model_out} and {vocab_out}")
    if args.sample is not None:
        tokens = json.loads(vocab_out.read_text(encoding="utf-8"))["tokens"]
        text, per_char = sample(model_out, tokens, args.sample, args.chars, args.temperature)
        print(f"temperature {args.temperature}: {text!r}")
        print(f"onnxruntime CPU, batch 1, 1 thread: {per_char * 1e3:.2f} ms per character")


if __name__ == "__main__":
    run_main("export_textgen", main)
