"""WebAssembly plugins and pipelines end to end against the real models: uploaded plugins,
pipelines declared over the API, an ImageNet classification of a real photo, OCR of text
rendered into an image, sentence embeddings whose paraphrases are closer than unrelated
sentences, and hostile plugins contained while good requests keep succeeding. The same
pipelines also answer the official Triton client."""
import concurrent.futures
import io
import json
import os
import ssl

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from PIL import Image, ImageDraw, ImageFont

from conftest import ROOT, start

DIST = os.environ.get("INFERGATE_PLUGINS", os.path.join(ROOT, "plugins", "dist"))
SKIMAGE_DATA = os.path.join(os.path.dirname(__import__("skimage").__file__), "data")


def plugin_file(name):
    path = os.path.join(DIST, f"{name}.wasm")
    assert os.path.exists(path), f"{path} missing: run plugins/build.sh (scripts/setup.sh does)"
    return path


class Api:
    def __init__(self, g):
        self.g = g
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Bearer {g.admin_key}"

    def __getattr__(self, method):
        # verify per request: a session-level one loses to REQUESTS_CA_BUNDLE from the environment.
        return lambda path, **kw: self.s.request(method.upper(), self.g.url + path, timeout=60,
                                                 verify=self.g.cert, **kw)

    def upload(self, name):
        with open(plugin_file(name), "rb") as f:
            r = self.post("/api/plugins", data=f.read())
        assert r.status_code in (200, 201), r.text
        return r.json()


@pytest.fixture(scope="module")
def api():
    g = start([("efficientnet-lite0", "efficientnet-lite0.onnx"), ("ocr-rec", "ocr-rec.onnx"),
               ("ocr-det", "ocr-det.onnx"), ("ocr-cls", "ocr-cls.onnx"), ("minilm", "minilm.onnx")])
    a = Api(g)
    for p in ["image-decode", "imagenet-topk", "ctc-decode", "wordpiece-tokenizer", "mean-pool",
              "passthrough", "hostile-loop", "hostile-trap", "hostile-memory"]:
        a.upload(p)
    pipelines = {
        "classify": {"pre": ["image-decode"], "model": "efficientnet-lite0", "post": ["imagenet-topk"],
                     "model_outputs": ["probabilities"],
                     "preprocess": {"output": "input", "width": 224, "height": 224,
                                    "mean": [127, 127, 127], "std": [128, 128, 128]}},
        # The demo's own spec: detection → angle classification → recognition per line.
        "ocr": json.load(open(os.path.join(ROOT, "scripts", "demo", "ocr.json"))),
        "embed": {"pre": ["wordpiece-tokenizer"], "model": "minilm", "post": ["mean-pool"]},
        "loop": {"pre": ["hostile-loop"], "model": "minilm"},
        "trap": {"pre": ["hostile-trap"], "model": "minilm"},
        "bomb": {"pre": ["hostile-memory"], "model": "minilm"},
    }
    for name, spec in pipelines.items():
        r = a.put(f"/api/pipelines/{name}", json=spec)
        assert r.status_code == 201, r.text
    yield a
    g.stop()


def run(api, pipeline, body, content_type, **params):
    return api.post(f"/api/pipelines/{pipeline}/run", data=body, params=params,
                    headers={"Content-Type": content_type})


def test_uploads_are_validated_and_nothing_bad_is_stored(api):
    before = len(api.get("/api/plugins").json()["plugins"])
    for body in [b"not wasm at all", b"\0asm\x01\0\0\0"]:  # garbage; a core module, not a component
        r = api.post("/api/plugins", data=body)
        assert r.status_code == 400, r.text
        assert "error" in r.json()
    with open(plugin_file("wrong-world"), "rb") as f:
        r = api.post("/api/plugins", data=f.read())
    assert r.status_code == 400 and "error" in r.json(), r.text
    assert len(api.get("/api/plugins").json()["plugins"]) == before
    stored = os.listdir(os.path.join(api.g.data, "plugins"))
    assert len(stored) == before, stored
    # The same component again is accepted as unchanged, not duplicated.
    again = api.upload("passthrough")
    assert again["name"] == "passthrough"
    assert len(api.get("/api/plugins").json()["plugins"]) == before


def test_classifies_a_real_photo(api):
    with open(os.path.join(SKIMAGE_DATA, "chelsea.png"), "rb") as f:  # a tabby cat
        r = run(api, "classify", f.read(), "image/png")
    assert r.status_code == 200, r.text
    top = r.json()["predictions"][0]
    labels = " ".join(p["label"].lower() for p in top[:3])
    assert "cat" in labels, top
    assert "pre;dur=" in r.headers["server-timing"]


def render(text):
    img = Image.new("RGB", (360, 48), "white")
    draw = ImageDraw.Draw(img)
    draw.text((8, 6), text, fill="black", font=ImageFont.load_default(size=30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_ocr_reads_rendered_text(api):
    r = run(api, "ocr", render("HELLO 2026"), "image/png")
    assert r.status_code == 200, r.text
    text = json.dumps(r.json())
    assert "HELLO" in text.upper() and "2026" in text, r.json()


def render_lines(lines, size=(460, 200), turn=False):
    """A PNG of `lines` of black text, and each line's ink box (x1, y1, x2, y2)."""
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=30)
    ink = []
    for i, line in enumerate(lines):
        draw.text((14, 12 + i * 60), line, fill="black", font=font)
        ink.append(draw.textbbox((14, 12 + i * 60), line, font=font))
    if turn:
        img = img.rotate(180)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue(), ink


def read_lines(answer):
    # PP-OCRv4's recogniser (trained mostly on Chinese) is unsure of Latin word spacing: it
    # reads "FIRST LINE" as "FIRSTLINE" or with an ideographic space. Lines are compared
    # without whitespace; their order and characters are what is checked.
    return ["".join(r["output"]["texts"][0]["text"].split()) for r in answer["regions"]]


THREE_LINES = ["FIRST LINE 1", "second line 22", "Third 333"]
SQUEEZED = ["".join(line.split()) for line in THREE_LINES]


def test_ocr_reads_three_lines_in_reading_order_with_their_boxes(api):
    png, ink = render_lines(THREE_LINES)
    r = run(api, "ocr", png, "image/png")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["width"], answer["height"]) == (460, 200)
    assert read_lines(answer) == SQUEEZED, answer
    for region, (ix1, iy1, ix2, iy2) in zip(answer["regions"], ink):
        # Each box holds its line's ink (give or take the detector's 2 px) and no other line.
        x1, y1, x2, y2 = region["box"]
        assert x1 <= ix1 + 2 and y1 <= iy1 + 2 and x2 >= ix2 - 2 and y2 >= iy2 - 2, (region, ink)
        assert y2 - y1 < 60, region
        assert region["angle"] == 0 and region["angle_confidence"] > 0.9, region


def test_ocr_turns_upside_down_lines_and_still_reads_them_in_order(api):
    png, _ = render_lines(THREE_LINES, turn=True)
    r = run(api, "ocr", png, "image/png")
    assert r.status_code == 200, r.text
    answer = r.json()
    # Turned as a whole, the page's last line is now on top; each line reads upright.
    assert read_lines(answer) == SQUEEZED[::-1], answer
    assert all(reg["angle"] == 180 for reg in answer["regions"]), answer


def test_ocr_of_a_blank_image_finds_no_lines(api):
    r = run(api, "ocr", render_lines([])[0], "image/png")
    assert r.status_code == 200, r.text
    assert r.json()["regions"] == []


def test_a_pipeline_with_an_unknown_detection_model_is_refused(api):
    spec = json.load(open(os.path.join(ROOT, "scripts", "demo", "ocr.json")))
    spec["detect"]["model"] = "no-such-detector"
    r = api.put("/api/pipelines/ocr-bad", json=spec)
    assert r.status_code == 404 and "no-such-detector" in r.json()["error"], r.text
    spec["detect"] = {"model": "ocr-det", "box_threshold": 2}
    r = api.put("/api/pipelines/ocr-bad", json=spec)
    assert r.status_code == 400 and "detect.box_threshold" in r.json()["error"], r.text


def test_a_model_a_detection_stage_runs_cannot_be_deleted(api):
    r = api.delete("/api/models/ocr-det")
    assert r.status_code == 409 and "ocr" in r.json()["error"], r.text


def embed(api, sentence):
    r = run(api, "embed", sentence.encode(), "text/plain")
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    v = np.array(out["data"], dtype=np.float32)
    return v / np.linalg.norm(v)


def test_paraphrases_are_closer_than_unrelated_sentences(api):
    a = embed(api, "A man is playing a guitar on stage.")
    b = embed(api, "Someone performs music with a guitar at a concert.")
    c = embed(api, "The stock market fell sharply on Tuesday.")
    assert a.shape == (384,)
    assert float(a @ b) > float(a @ c) + 0.1, (float(a @ b), float(a @ c))


def test_pipelines_answer_the_triton_client(api):
    g = api.g
    c = httpclient.InferenceServerClient(url=g.hostport, ssl=True,
                                         ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))
    text = np.array([b"hello world"], dtype=np.object_)
    i = httpclient.InferInput("text", [1], "BYTES")
    i.set_data_from_numpy(text)
    out = c.infer("embed", [i], headers={"Authorization": f"Bearer {g.admin_key}"})
    names = [o["name"] for o in out.get_response()["outputs"]]
    assert len(names) == 1
    v = out.as_numpy(names[0])
    assert v.size == 384 and np.isfinite(v).all()


@pytest.mark.parametrize("pipeline,reason", [("loop", "timeout"), ("trap", "trap"), ("bomb", "memory")])
def test_hostile_plugins_fail_alone_while_good_requests_succeed(api, pipeline, reason):
    def good(_):
        return embed(api, "hello world").shape

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        goods = [pool.submit(good, i) for i in range(12)]
        bad = run(api, pipeline, b"anything", "text/plain")
        assert all(f.result() == (384,) for f in goods)
    assert bad.status_code == 500, bad.text
    err = bad.json()["error"]
    assert "hostile" in err and reason in err, err
    assert api.get("/v2/health/live").status_code == 200


def test_plugins_in_use_cannot_be_deleted_and_swaps_apply_to_new_requests(api):
    r = api.delete("/api/plugins/image-decode")
    assert r.status_code == 409 and "classify" in r.json()["error"], r.text
    r = api.put("/api/pipelines/swap", json={"model": "minilm", "pre": ["passthrough"], "post": []})
    assert r.status_code == 201, r.text
    r = api.put("/api/pipelines/swap", json={"model": "minilm", "pre": ["wordpiece-tokenizer"],
                                             "post": ["mean-pool"]})
    assert r.status_code == 200, r.text
    assert run(api, "swap", b"hello world", "text/plain").status_code == 200
    assert api.delete("/api/pipelines/swap").status_code == 200
    assert api.get("/api/pipelines/swap").status_code == 404
    bad = api.put("/api/pipelines/broken", json={"model": "minilm", "pre": ["imagenet-topk"]})
    assert bad.status_code == 400 and "post" in bad.json()["error"], bad.text
    missing = api.put("/api/pipelines/broken", json={"model": "nope", "pre": []})
    assert missing.status_code == 404, missing.text
    clash = api.put("/api/pipelines/minilm", json={"model": "minilm"})
    assert clash.status_code == 409, clash.text


def test_plugin_calls_and_faults_are_in_metrics(api):
    run(api, "trap", b"anything", "text/plain")
    assert embed(api, "hello world").shape == (384,)
    r = api.get("/metrics")
    assert r.status_code == 200, r.text
    lines = r.text.splitlines()

    def count(plugin, outcome):
        for line in lines:
            if line.startswith("infergate_plugin_call_duration_seconds_count{") \
                    and f'plugin="{plugin}"' in line and f'outcome="{outcome}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert count("hostile-trap", "trap") >= 1
    assert count("wordpiece-tokenizer", "ok") >= 1
    assert count("mean-pool", "ok") >= 1


def test_openai_embeddings_through_the_embed_pipeline(api):
    import openai

    g = api.g
    oc = openai.OpenAI(base_url=f"{g.url}/v1", api_key=g.admin_key, max_retries=0,
                       http_client=openai.DefaultHttpxClient(
                           verify=ssl.create_default_context(cafile=g.cert)))
    sentences = ["A man is playing a guitar on stage.",
                 "Someone performs music with a guitar at a concert.",
                 "The stock market fell sharply on Tuesday."]
    out = oc.embeddings.create(model="embed", input=sentences)
    assert [d.index for d in out.data] == [0, 1, 2]
    a, b, c = (np.array(d.embedding, dtype=np.float32) for d in out.data)
    assert a.shape == (384,)
    assert float(a @ b) > float(a @ c) + 0.1
    # The same vector as the pipeline's own route.
    np.testing.assert_allclose(a, embed(api, sentences[0]), rtol=1e-5, atol=1e-6)
    assert out.usage.prompt_tokens > 0
    with pytest.raises(openai.NotFoundError):
        oc.embeddings.create(model="no-such-pipeline", input="x")
    with pytest.raises(openai.UnprocessableEntityError):  # image-decode rejects text: 422
        oc.embeddings.create(model="classify", input="not an image")
    with pytest.raises(openai.BadRequestError):
        oc.embeddings.create(model="embed", input=[], encoding_format="float")


def test_per_plugin_limits_apply_to_new_calls(api):
    plugin = "/api/plugins/wordpiece-tokenizer/versions/0.1.0/limits"
    # 1 MiB of linear memory cannot even hold the tokenizer's vocabulary: its calls fault.
    r = api.put(plugin, json={"memory_mib": 1})
    assert r.status_code == 200, r.text
    assert r.json()["limits"] == {"memory_mib": 1}
    assert r.json()["effective_limits"]["memory_mib"] == 1
    bad = run(api, "embed", b"hello world", "text/plain")
    assert bad.status_code == 500 and "wordpiece-tokenizer" in bad.json()["error"], bad.text
    # Back to the server's defaults: the same call succeeds again.
    assert api.put(plugin, json={}).status_code == 200
    assert embed(api, "hello world").shape == (384,)
    listed = [p for p in api.get("/api/plugins").json()["plugins"] if p["name"] == "wordpiece-tokenizer"]
    assert listed[0]["limits"] == {}
    for body, status in [({"memory_mib": 0}, 400), ({"memroy_mib": 4}, 400), ("[1]", 400)]:
        r = api.put(plugin, json=body)
        assert r.status_code == status, r.text
    assert api.put("/api/plugins/wordpiece-tokenizer/versions/9.9.9/limits", json={}).status_code == 404
