"""Checks the model exporters end to end: run them as setup.sh does, then test what they wrote.

Run: .cache/venv/bin/python -m pytest scripts/test_exports.py
The pinned packages come from INFERGATE_PKGS (default: <repo>/.cache/pkgs, filled by setup.sh).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import skimage
from PIL import Image

import export_efficientnet
import export_textgen

SCRIPTS = Path(__file__).resolve().parent
PKGS = Path(os.environ.get("INFERGATE_PKGS", SCRIPTS.parent / ".cache" / "pkgs"))
TEXTGEN_PKG = PKGS / export_textgen.PACKAGE_DIR
IMAGES = Path(skimage.__file__).parent / "data"
IMAGENET_CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
ESPRESSO, CUP = 967, 968
ENGLISH = (
    "The quick brown fox jumps over the lazy dog. I think this is one of the best things I have "
    "ever seen in my life, and people should know about it."
)


def run_exporter(script: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--pkgs", str(PKGS), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> Path:
    if not PKGS.is_dir():
        pytest.fail(f"pinned packages not found at {PKGS}: run scripts/setup.sh or set INFERGATE_PKGS")
    out = tmp_path_factory.mktemp("models")
    for script in ("export_efficientnet.py", "export_textgen.py"):
        done = run_exporter(script, out)
        assert done.returncode == 0, f"{script} failed:\n{done.stderr}"
    return out


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def signature(values) -> list[tuple]:
    return [(v.name, v.type, v.shape) for v in values]


# ----------------------------------------------------------------------------- EfficientNet


def imagenet_input(name: str) -> np.ndarray:
    """The documented client-side preprocessing: RGB, 224x224, (pixel - 127) / 128, NCHW."""
    image = Image.open(IMAGES / name).convert("RGB").resize((224, 224), Image.BILINEAR)
    return ((np.asarray(image, np.float32) - 127.0) / 128.0).transpose(2, 0, 1)[None]


def test_efficientnet_graph_signature(models):
    path = models / export_efficientnet.OUTPUT
    onnx.checker.check_model(onnx.load(path), full_check=True)
    s = session(path)
    assert signature(s.get_inputs()) == [("input", "tensor(float)", ["batch", 3, 224, 224])]
    assert signature(s.get_outputs()) == [
        ("logits", "tensor(float)", ["batch", 1000]),
        ("probabilities", "tensor(float)", ["batch", 1000]),
    ]
    # Batch norm is folded: nothing but convolutions and cheap element-wise ops remain.
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert ops == {"Conv", "Clip", "Add", "GlobalAveragePool", "Flatten", "Gemm", "Softmax"}


def test_efficientnet_classifies_the_cat(models):
    logits, probs = session(models / export_efficientnet.OUTPUT).run(None, {"input": imagenet_input("chelsea.png")})
    assert int(np.argmax(logits[0])) in IMAGENET_CATS
    assert probs[0, list(IMAGENET_CATS)].sum() > 0.5
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def test_efficientnet_classifies_the_coffee(models):
    s = session(models / export_efficientnet.OUTPUT)
    (probs,) = s.run(["probabilities"], {"input": imagenet_input("coffee.png")})
    top5 = set(np.argsort(-probs[0])[:5].tolist())
    assert {ESPRESSO, CUP} & top5, f"top-5 was {top5}"


def test_efficientnet_batches_like_single_images(models):
    s = session(models / export_efficientnet.OUTPUT)
    cat, coffee = imagenet_input("chelsea.png"), imagenet_input("coffee.png")
    (batched,) = s.run(["logits"], {"input": np.concatenate([cat, coffee])})
    (alone,) = s.run(["logits"], {"input": coffee})
    np.testing.assert_allclose(batched[1], alone[0], atol=1e-4)


def torch_module_forward(w: dict[str, np.ndarray], image: np.ndarray) -> np.ndarray:
    """Numpy float64 reading of efficientnet_lite_pytorch's forward for one image: convolutions
    with TensorFlow SAME zero padding (odd pixel after), unfolded batch norm, ReLU6."""

    def conv(x, name, stride=1):
        kernel = w[f"{name}.weight"].astype(np.float64)
        k = kernel.shape[-1]
        out = -(-x.shape[1] // stride)
        total = max((out - 1) * stride + k - x.shape[1], 0)
        x = np.pad(x, [(0, 0), (total // 2, total - total // 2), (total // 2, total - total // 2)])
        win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, ::stride, ::stride]
        if kernel.shape[1] == 1 and k > 1:  # depthwise
            return np.einsum("chwij,cij->chw", win, kernel[:, 0])
        return np.einsum("chwij,ocij->ohw", win, kernel)

    def bn(x, name):
        scale = w[f"{name}.weight"] / np.sqrt(w[f"{name}.running_var"] + 1e-3)
        return (x - w[f"{name}.running_mean"][:, None, None]) * scale[:, None, None] + w[f"{name}.bias"][:, None, None]

    def relu6(x):
        return np.clip(x, 0.0, 6.0)

    x = relu6(bn(conv(image.astype(np.float64), "_conv_stem", 2), "_bn0"))
    block = 0
    for repeats, stride in zip(export_efficientnet.STAGE_REPEATS, export_efficientnet.STAGE_STRIDES):
        for r in range(repeats):
            p, inputs = f"_blocks.{block}", x
            if f"{p}._expand_conv.weight" in w:
                x = relu6(bn(conv(x, f"{p}._expand_conv"), f"{p}._bn0"))
            x = relu6(bn(conv(x, f"{p}._depthwise_conv", stride if r == 0 else 1), f"{p}._bn1"))
            x = bn(conv(x, f"{p}._project_conv"), f"{p}._bn2")
            if x.shape == inputs.shape:
                x = x + inputs
            block += 1
    x = relu6(bn(conv(x, "_conv_head"), "_bn1")).mean(axis=(1, 2))
    return x @ w["_fc.weight"].T.astype(np.float64) + w["_fc.bias"]


def test_efficientnet_matches_numpy_module_forward(models):
    weights = export_efficientnet.load_legacy_state_dict(PKGS / export_efficientnet.WEIGHTS)
    image = imagenet_input("chelsea.png")
    (logits,) = session(models / export_efficientnet.OUTPUT).run(["logits"], {"input": image})
    reference = torch_module_forward(weights, image[0])
    assert np.abs(logits[0] - reference).max() < 1e-3 * np.abs(reference).max()


def test_legacy_reader_refuses_code_in_the_pickle(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.pth"
    with open(path, "wb") as f:
        for header in (export_efficientnet.LEGACY_MAGIC, export_efficientnet.LEGACY_PROTOCOL, {"little_endian": True}):
            pickle.dump(header, f, protocol=2)
        pickle.dump({"w": Payload()}, f, protocol=2)
    with pytest.raises(export_efficientnet.ExportError, match="refusing to load"):
        export_efficientnet.load_legacy_state_dict(path)


# ----------------------------------------------------------------------------- textgenrnn


def keras_forward(w: export_textgen.KerasWeights, ids: np.ndarray) -> np.ndarray:
    """Straight numpy (float64) forward pass of textgenrnn's Keras model, gate order i, f, c, o."""

    def sigmoid(x):
        return 1.0 / (1.0 + np.exp(-x))

    embedded = w.embedding[ids].astype(np.float64)
    features, x = [embedded], embedded
    for kernel, recurrent, bias in w.lstm:
        h = np.zeros((ids.shape[0], recurrent.shape[0]))
        c = np.zeros_like(h)
        outputs = []
        for t in range(ids.shape[1]):
            i, f, g, o = np.split(x[:, t] @ kernel + h @ recurrent + bias, 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            outputs.append(h)
        x = np.stack(outputs, axis=1)
        features.append(x)
    seq = np.concatenate(features, axis=-1)
    logits = (seq @ w.attention)[..., 0]
    ai = np.exp(logits - logits.max(axis=-1, keepdims=True))
    attention = ai / (ai.sum(axis=1, keepdims=True) + export_textgen.KERAS_EPSILON)
    dense = (seq * attention[..., None]).sum(axis=1) @ w.dense_kernel + w.dense_bias
    e = np.exp(dense - dense.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="session")
def keras_weights():
    return export_textgen.load_keras_weights(TEXTGEN_PKG / "textgenrnn_weights.hdf5")


@pytest.fixture(scope="session")
def vocab(models):
    return json.loads((models / export_textgen.VOCAB_OUTPUT).read_text(encoding="utf-8"))


def english_rows(vocab) -> tuple[np.ndarray, np.ndarray]:
    """Every prefix of <s> + ENGLISH as a model input row, and the character that follows it."""
    char_to_index = {t: i for i, t in enumerate(vocab["tokens"]) if i}
    text = [vocab["meta_token"]] + list(ENGLISH)
    rows = np.concatenate([export_textgen.encode(text[:n], char_to_index) for n in range(1, len(text))])
    return rows, np.array([char_to_index[c] for c in text[1:]])


def test_textgen_graph_signature(models):
    path = models / export_textgen.MODEL_OUTPUT
    onnx.checker.check_model(onnx.load(path), full_check=True)
    s = session(path)
    assert signature(s.get_inputs()) == [("input", "tensor(int64)", ["batch", 40])]
    assert signature(s.get_outputs()) == [("probabilities", "tensor(float)", ["batch", 465])]


def test_textgen_matches_numpy_keras_forward(models, keras_weights, vocab):
    rows, _ = english_rows(vocab)
    # Random text over the first 60 classes (ASCII letters, digits, punctuation). Not over all 465:
    # strings of rare symbols drive the LSTM into a regime so ill-conditioned that a float32 numpy
    # pass already differs from float64 by 1.6e-4, so no float32 engine could meet 1e-4 there.
    rng = np.random.default_rng(7)
    random_rows = rng.integers(1, 60, size=(16, 40))
    random_rows[:, :10] = 0  # left padding, as short prompts have
    ids = np.concatenate([rows, random_rows])
    (onnx_probs,) = session(models / export_textgen.MODEL_OUTPUT).run(None, {"input": ids})
    diff = np.abs(onnx_probs - keras_forward(keras_weights, ids)).max()
    assert diff < 1e-4, f"max abs diff {diff}"


def test_textgen_predicts_english(models, vocab):
    # Cross-entropy of real English under the model; a mis-converted LSTM scores ~70 bits/char.
    rows, targets = english_rows(vocab)
    (probs,) = session(models / export_textgen.MODEL_OUTPUT).run(None, {"input": rows})
    bits_per_char = -np.mean(np.log2(probs[np.arange(len(targets)), targets]))
    assert bits_per_char < 2.5, f"{bits_per_char:.2f} bits per character"


def test_textgen_greedy_sampling_writes_words(models, vocab):
    seed = "The meaning of life is "
    text, _ = export_textgen.sample(models / export_textgen.MODEL_OUTPUT, vocab["tokens"], seed, 100, 0.0)
    generated = text[len(seed) :]
    assert text.startswith(seed) and 20 <= len(generated) <= 100
    assert sum(c.isascii() and (c.isalpha() or c in " .,'") for c in generated) >= 0.9 * len(generated)
    assert 2 <= np.mean([len(word) for word in generated.split()]) <= 8


def test_textgen_vocab_file_matches_package(models, vocab):
    original = json.loads((TEXTGEN_PKG / "textgenrnn_vocab.json").read_text(encoding="utf-8"))
    tokens = vocab["tokens"]
    assert vocab["format"] == export_textgen.VOCAB_FORMAT
    assert vocab["max_length"] == 40 and vocab["padding_index"] == 0 and vocab["unknown_index"] == 0
    assert len(tokens) == len(original) + 1 == 465 and tokens[0] == ""
    assert all(tokens[index] == char for char, index in original.items())
    assert tokens[vocab["meta_index"]] == vocab["meta_token"] == "<s>"


# ----------------------------------------------------------------------------- setup contract

OUTPUTS = {
    "export_efficientnet.py": [export_efficientnet.OUTPUT],
    "export_textgen.py": [export_textgen.MODEL_OUTPUT, export_textgen.VOCAB_OUTPUT],
}


def file_identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


@pytest.mark.parametrize("script", sorted(OUTPUTS))
def test_second_run_rewrites_nothing(models, script):
    before = {name: file_identity(models / name) for name in OUTPUTS[script]}
    done = run_exporter(script, models)
    assert done.returncode == 0 and "up to date" in done.stdout
    assert {name: file_identity(models / name) for name in OUTPUTS[script]} == before


def test_stale_stamp_triggers_export(models):
    out = models / export_efficientnet.OUTPUT
    before = file_identity(out)
    (models / ".efficientnet-lite0.stamp").write_text("{}")
    done = run_exporter("export_efficientnet.py", models)
    assert done.returncode == 0 and "wrote" in done.stdout
    assert file_identity(out) != before  # replaced by rename, so a new inode
    assert run_exporter("export_efficientnet.py", models).stdout.strip().endswith("is up to date")


@pytest.mark.parametrize("script", sorted(OUTPUTS))
def test_missing_package_fails_clearly(tmp_path, script):
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--pkgs", str(tmp_path / "none"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "error:" in done.stderr and "not found" in done.stderr
    assert not any(tmp_path.iterdir()), "a failed export left files behind"
