"""The OpenAPI document of the HTTP API (GET /api/openapi.json) against a real server: it passes
a real validator (openapi-spec-validator), and real answers of every documented operation
match the schemas it gives for their status and media type, as do the JSON bodies sent to it.
Which routes the server serves is checked in-process against the router
(gateway/server/tests/handlers/openapi.rs); this checks what they answer."""
import base64
import io
import json
import os
import subprocess
import tempfile

import pytest
import requests
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec
from PIL import Image

from conftest import BIN, MODELS, Gateway, register
from test_pipelines import plugin_file

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "scripts", "demo")


@pytest.fixture(scope="module")
def server():
    # The plugins are registered offline before the start: a running server picks up what the
    # offline commands register only at its next start.
    data = tempfile.mkdtemp(prefix="infergate-py-")
    for name, file in [("ocr-cls", "ocr-cls.onnx"), ("minilm", "minilm.onnx"),
                       ("efficientnet-lite0", "efficientnet-lite0.onnx"),
                       ("textgen", "textgen.onnx"), ("smollm2", "smollm2.gguf")]:
        register(data, name, file)
    plugins = [plugin_file(p) for p in ("image-decode", "imagenet-topk", "wordpiece-tokenizer",
                                        "mean-pool", "pii-mask")]
    subprocess.run([BIN, "plugins", "add", "--data-dir", data, *plugins], check=True,
                   capture_output=True)
    # A payload log sink, so that a model's payload log can be set.
    config = os.path.join(data, "infergate.toml")
    with open(config, "w") as f:
        f.write(f'[payload_log.sinks.audit]\nfile = {{ path = "{data}/payload.jsonl" }}\n')
    g = Gateway(data, extra_args=["--config", config,
                                  "--openai-vocab", os.path.join(MODELS, "textgen-vocab.json"),
                                  "--llm-max-sequences", "2", "--llm-context", "512",
                                  "--llm-threads", "1"])
    yield g
    g.stop()


class Checked:
    """Calls the server and checks each answer (and each JSON body sent) against the document;
    records which documented operations were called."""

    def __init__(self, g, doc):
        self.g, self.doc, self.called = g, doc, set()
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {g.admin_key}"

    def validator(self, schema):
        return Draft202012Validator({**schema, "components": self.doc["components"]})

    def call(self, method, template, params=None, *, body=None, json_body=None, headers=None,
             key="admin", query=None, stream=False):
        op = self.doc["paths"][template][method.lower()]
        path = template
        for name, value in (params or {}).items():
            path = path.replace("{" + name + "}", str(value))
        if json_body is not None:
            media = op["requestBody"]["content"]["application/json"]
            errors = list(self.validator(media["schema"]).iter_errors(json_body))
            assert not errors, f"{method} {template}: the request is not what the document says: {errors[0]}"
            body = json.dumps(json_body)
            headers = {**(headers or {}), "Content-Type": "application/json"}
        h = dict(headers or {})
        if key is None:
            h["Authorization"] = ""
        elif key != "admin":
            h["Authorization"] = f"Bearer {key}"
        # verify per request: REQUESTS_CA_BUNDLE in the environment overrides Session.verify.
        r = self.session.request(method, self.g.url + path, data=body, headers=h, params=query,
                                 stream=stream, verify=self.g.cert)
        self.called.add((method.upper(), template))
        self.check(op, method, template, r)
        return r

    def check(self, op, method, template, r):
        responses = op["responses"]
        answer = responses.get(str(r.status_code)) or responses.get("default")
        where = f"{method} {template} answered {r.status_code}"
        assert answer is not None, f"{where}, which the document does not list"
        content = answer.get("content")
        if not content:
            assert r.content == b"", f"{where} with a body the document does not describe"
            return
        media = r.headers.get("content-type", "").split(";")[0].strip()
        assert media in content, f"{where} as {media!r}; the document says {sorted(content)}"
        if media == "application/octet-stream" and "Inference-Header-Content-Length" in answer.get("headers", {}):
            assert "inference-header-content-length" in r.headers, f"{where} without its header length"
        schema = content[media].get("schema")
        if media == "application/json" and schema is not None:
            errors = sorted(self.validator(schema).iter_errors(r.json()), key=lambda e: e.path)
            assert not errors, f"{where}: {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.fixture(scope="module")
def api(server):
    r = requests.get(server.url + "/api/openapi.json", verify=server.cert,
                     headers={"Authorization": f"Bearer {server.key('infer')}"})
    assert r.status_code == 200
    return Checked(server, r.json())


def test_the_document_passes_a_validator(api):
    validate_spec(api.doc)
    assert api.doc["openapi"].startswith("3.1")


def png(size=(64, 48)):
    out = io.BytesIO()
    Image.new("RGB", size, (200, 120, 40)).save(out, format="PNG")
    return out.getvalue()


def binary_infer_body():
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 4 * 3 * 48 * 192}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header, header + bytes(4 * 3 * 48 * 192)


def test_every_documented_operation_answers_as_documented(api, server):
    call = api.call
    infer_key = server.key("infer")
    # KServe v2 and Triton's extensions
    call("GET", "/v2/health/live", key=None)
    call("GET", "/v2/health/ready", key=None)
    assert call("GET", "/v2").status_code == 200
    call("GET", "/v2", key=None)  # 401
    call("GET", "/v2", key="not-a-key")
    assert call("GET", "/v2/models/{model}", {"model": "ocr-cls"}).status_code == 200
    call("GET", "/v2/models/{model}", {"model": "nothing"})  # 404
    call("GET", "/v2/models/{model}/versions/{version}", {"model": "ocr-cls", "version": 1})
    call("GET", "/v2/models/{model}/ready", {"model": "ocr-cls"})
    call("GET", "/v2/models/{model}/versions/{version}/ready", {"model": "ocr-cls", "version": 1})
    x = {"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32", "data": [0.0] * (3 * 48 * 192)}
    r = call("POST", "/v2/models/{model}/infer", {"model": "ocr-cls"}, json_body={"inputs": [x]})
    assert r.status_code == 200, r.text
    r = call("POST", "/v2/models/{model}/versions/{version}/infer", {"model": "ocr-cls", "version": 1},
             json_body={"id": "a", "inputs": [x], "outputs": [{"name": r.json()["outputs"][0]["name"]}]})
    assert r.status_code == 200 and r.json()["id"] == "a"
    header, body = binary_infer_body()
    r = call("POST", "/v2/models/{model}/infer", {"model": "ocr-cls"}, body=body,
             headers={"Inference-Header-Content-Length": str(len(header)),
                      "Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and "inference-header-content-length" in r.headers
    call("POST", "/v2/models/{model}/infer", {"model": "ocr-cls"}, json_body={"inputs": []})  # 400
    call("GET", "/v2/models/{model}/config", {"model": "ocr-cls"})
    call("GET", "/v2/models/{model}/versions/{version}/config", {"model": "ocr-cls", "version": 1})
    assert call("GET", "/v2/models/stats").status_code == 200
    call("GET", "/v2/models/{model}/stats", {"model": "ocr-cls"})
    call("GET", "/v2/models/{model}/versions/{version}/stats", {"model": "ocr-cls", "version": 1})
    call("POST", "/v2/repository/index")
    call("POST", "/v2/repository/index", json_body={"ready": True})
    call("POST", "/v2/repository/models/{model}/load", {"model": "minilm"})
    call("POST", "/v2/repository/models/{model}/unload", {"model": "minilm"})
    call("POST", "/v2/repository/models/{model}/load", {"model": "minilm"}, key=infer_key)  # 403
    shm_key = f"/openapi-{os.getpid()}"
    with open(f"/dev/shm{shm_key}", "wb") as f:
        f.write(b"\0" * 64)
    try:
        r = call("POST", "/v2/systemsharedmemory/region/{name}/register", {"name": "r"},
                 json_body={"key": shm_key, "offset": 0, "byte_size": 64})
        assert r.status_code == 200, r.text
        call("POST", "/v2/systemsharedmemory/region/{name}/register", {"name": "r"},
             json_body={"key": shm_key, "byte_size": 64})  # 400: registered already
        assert call("GET", "/v2/systemsharedmemory/status").json()[0]["byte_size"] == 64
        call("GET", "/v2/systemsharedmemory/region/{name}/status", {"name": "r"})
        call("GET", "/v2/systemsharedmemory/region/{name}/status", {"name": "none"})  # 404
        call("POST", "/v2/systemsharedmemory/region/{name}/unregister", {"name": "r"})
        call("POST", "/v2/systemsharedmemory/unregister")
    finally:
        os.unlink(f"/dev/shm{shm_key}")
    call("GET", "/v2/cudasharedmemory/status")
    call("GET", "/v2/cudasharedmemory/region/{name}/status", {"name": "r"})  # 404
    call("POST", "/v2/cudasharedmemory/region/{name}/register", {"name": "r"})  # 400
    call("POST", "/v2/cudasharedmemory/region/{name}/unregister", {"name": "r"})
    call("POST", "/v2/cudasharedmemory/unregister")
    r = call("POST", "/v2/trace/setting", json_body={"trace_rate": "5"})
    assert r.status_code == 200 and r.json()["trace_rate"] == "5", r.text
    call("GET", "/v2/trace/setting")
    call("POST", "/v2/trace/setting", json_body={"trace_rate": "often"})  # 400
    r = call("POST", "/v2/models/{model}/trace/setting", {"model": "ocr-cls"},
             json_body={"trace_level": ["OFF"]})
    assert r.status_code == 200 and r.json()["trace_level"] == ["OFF"], r.text
    call("GET", "/v2/models/{model}/trace/setting", {"model": "ocr-cls"})
    call("GET", "/v2/models/{model}/trace/setting", {"model": "nothing"})  # 400
    call("POST", "/v2/models/{model}/trace/setting", {"model": "ocr-cls"}, json_body={"trace_level": None})
    call("POST", "/v2/trace/setting", json_body={"trace_rate": None})

    # Models
    call("GET", "/api/models")
    call("GET", "/api/models/{model}", {"model": "ocr-cls"})
    call("GET", "/api/models/{model}/versions/{version}", {"model": "ocr-cls", "version": 1})
    with open(os.path.join(MODELS, "ocr-cls.onnx"), "rb") as f:
        onnx = f.read()
    r = call("POST", "/api/models/{model}/versions", {"model": "copy"}, body=onnx,
             headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    r = call("PUT", "/api/models/{model}/config", {"model": "copy"}, json_body={"max_batch_size": 4})
    assert r.status_code == 200, r.text
    call("PUT", "/api/models/{model}/versions/{version}/config", {"model": "copy", "version": 1},
         json_body={"max_batch_size": 2})
    call("POST", "/api/models/{model}/versions", {"model": "copy"}, body=b"not a model",
         headers={"Content-Type": "application/octet-stream"})
    call("DELETE", "/api/models/{model}/versions/{version}", {"model": "copy", "version": 1})
    call("POST", "/api/models/{model}/versions", {"model": "copy"}, body=onnx,
         headers={"Content-Type": "application/octet-stream"})
    r = call("PUT", "/api/models/{model}/traffic", {"model": "copy"},
             json_body={"split": [{"version": 1, "weight": 1}], "sticky": "key"})
    assert r.status_code == 200, r.text
    r = call("PUT", "/api/models/{model}/traffic", {"model": "copy"},
             json_body={"split": [{"version": 1, "weight": 0}]})
    assert r.status_code == 400, r.text
    call("GET", "/api/models/{model}/traffic", {"model": "copy"})
    assert call("DELETE", "/api/models/{model}/traffic", {"model": "copy"}).status_code == 200
    r = call("PUT", "/api/models/{model}/payload-log", {"model": "copy"},
             json_body={"mode": "all", "sample": 0.5, "sink": "audit"})
    assert r.status_code == 200 and r.json()["sinks"] == ["audit"], r.text
    r = call("PUT", "/api/models/{model}/payload-log", {"model": "copy"},
             json_body={"mode": "all", "sink": "elsewhere"})
    assert r.status_code == 400 and "sink" in r.json()["error"], r.text
    assert call("GET", "/api/models/{model}/payload-log", {"model": "copy"}).json()["payload_log"]["sample"] == 0.5
    assert call("DELETE", "/api/models/{model}/payload-log", {"model": "copy"}).status_code == 200
    call("GET", "/api/models/{model}/payload-log", {"model": "nothing"})  # 404
    # A sink defined at run time, which the pipeline's and the key's settings below name.
    call("GET", "/api/payload-log/sinks")
    late = os.path.join(tempfile.mkdtemp(prefix="infergate-py-sink-"), "late.jsonl")
    r = call("PUT", "/api/payload-log/sinks/{name}", {"name": "late"},
             json_body={"file": {"path": late, "keep": 2}})
    assert r.status_code == 200 and r.json()["origin"] == "api", r.text
    r = call("PUT", "/api/payload-log/sinks/{name}", {"name": "late"},
             json_body={"file": {"path": late, "max_bytes": 1}})
    assert r.status_code == 400 and "file.max_bytes" in r.json()["error"], r.text
    r = call("PUT", "/api/models/{model}/guardrails", {"model": "smollm2"},
             json_body={"guardrails": [{"plugin": "pii-mask"}]})
    assert r.status_code == 200 and r.json()["guardrails"][0]["plugin"] == "pii-mask", r.text
    r = call("PUT", "/api/models/{model}/guardrails", {"model": "smollm2"},
             json_body={"guardrails": [{"plugin": "no-such-guardrail"}]})
    assert r.status_code == 400, r.text
    assert len(call("GET", "/api/models/{model}/guardrails", {"model": "smollm2"}).json()["guardrails"]) == 1
    assert call("DELETE", "/api/models/{model}/guardrails", {"model": "smollm2"}).status_code == 200
    assert call("DELETE", "/api/models/{model}", {"model": "copy"}).status_code == 200

    # Plugins and pipelines
    with open(plugin_file("passthrough"), "rb") as f:
        wasm = f.read()
    r = call("POST", "/api/plugins", body=wasm, headers={"Content-Type": "application/wasm"})
    assert r.status_code in (200, 201), r.text
    name, version = r.json()["name"], r.json()["version"]
    call("GET", "/api/plugins")
    call("GET", "/api/plugins/{plugin}", {"plugin": name})
    r = call("PUT", "/api/plugins/{plugin}/versions/{version}/limits",
             {"plugin": name, "version": version}, json_body={"deadline_ms": 500})
    assert r.status_code == 200, r.text
    for spec in ("classify", "embed"):
        with open(os.path.join(DEMO, f"{spec}.json")) as f:
            r = call("PUT", "/api/pipelines/{pipeline}", {"pipeline": spec}, json_body=json.load(f))
        assert r.status_code in (200, 201), r.text
    call("GET", "/api/pipelines")
    call("GET", "/api/pipelines/{pipeline}", {"pipeline": "classify"})
    r = call("POST", "/api/pipelines/{pipeline}/run", {"pipeline": "classify"}, body=png(),
             headers={"Content-Type": "image/png"})
    assert r.status_code == 200, r.text
    call("POST", "/api/pipelines/{pipeline}/run", {"pipeline": "classify"}, body=b"not an image",
         headers={"Content-Type": "image/png"})
    r = call("PUT", "/api/pipelines/{pipeline}", {"pipeline": "bare"},
             json_body={"pre": [name], "model": "ocr-cls"})
    assert r.status_code in (200, 201), r.text
    r = call("PUT", "/api/pipelines/{pipeline}/payload-log", {"pipeline": "bare"},
             json_body={"mode": "all", "sink": "late"})
    assert r.status_code == 200 and r.json()["pipeline"] == "bare", r.text
    assert call("GET", "/api/pipelines/{pipeline}/payload-log",
                {"pipeline": "bare"}).json()["payload_log"]["sink"] == "late"
    r = call("DELETE", "/api/payload-log/sinks/{name}", {"name": "late"})
    assert r.status_code == 409 and "pipeline 'bare'" in r.json()["error"], r.text
    assert call("DELETE", "/api/pipelines/{pipeline}/payload-log", {"pipeline": "bare"}).status_code == 200
    call("DELETE", "/api/pipelines/{pipeline}", {"pipeline": "bare"})
    call("DELETE", "/api/plugins/{plugin}/versions/{version}", {"plugin": name, "version": version})
    r = call("POST", "/api/plugins", body=wasm, headers={"Content-Type": "application/wasm"})
    call("DELETE", "/api/plugins/{plugin}", {"plugin": name})

    # Keys
    r = call("POST", "/api/keys", json_body={"name": "openapi", "scopes": ["infer"],
                                             "rate_limit": {"rps": 5, "burst": 10}})
    assert r.status_code == 201, r.text
    key_id = r.json()["id"]
    call("GET", "/api/keys")
    call("PATCH", "/api/keys/{id}", {"id": key_id}, json_body={"rate_limit": None, "max_concurrent": 3})
    call("GET", "/api/keys/{id}/usage", {"id": key_id})
    r = call("PUT", "/api/keys/{id}/guardrails", {"id": key_id},
             json_body={"guardrails": [{"plugin": "pii-mask"}]})
    assert r.status_code == 200 and r.json()["key_id"] == key_id, r.text
    assert call("GET", "/api/keys").json()["keys"][-1]["guardrails"][0]["plugin"] == "pii-mask"
    r = call("PUT", "/api/keys/{id}/guardrails", {"id": key_id},
             json_body={"guardrails": [{"plugin": "no-such-guardrail"}]})
    assert r.status_code == 400, r.text
    assert call("GET", "/api/keys/{id}/guardrails", {"id": key_id}).json()["guardrails"][0]["plugin"] == "pii-mask"
    assert call("DELETE", "/api/keys/{id}/guardrails", {"id": key_id}).json()["guardrails"] == []
    r = call("PUT", "/api/keys/{id}/payload-log", {"id": key_id},
             json_body={"mode": "request", "sample": 0.5, "sink": "late"})
    assert r.status_code == 200 and r.json()["payload_log"]["sample"] == 0.5, r.text
    assert call("GET", "/api/keys").json()["keys"][-1]["payload_log"]["sink"] == "late"
    r = call("PUT", "/api/keys/{id}/payload-log", {"id": key_id},
             json_body={"mode": "request", "sink": "nowhere"})
    assert r.status_code == 400 and "sink" in r.json()["error"], r.text
    assert call("GET", "/api/keys/{id}/payload-log", {"id": key_id}).json()["payload_log"]["mode"] == "request"
    assert call("DELETE", "/api/keys/{id}/payload-log", {"id": key_id}).json()["payload_log"] is None
    assert call("DELETE", "/api/payload-log/sinks/{name}", {"name": "late"}).json() == {"deleted": "late"}
    call("GET", "/api/whoami", key=infer_key)
    call("DELETE", "/api/keys/{id}", {"id": key_id})
    call("DELETE", "/api/keys/{id}", {"id": 999999})  # 404
    call("GET", "/api/keys", key=infer_key)  # 403

    # Metrics, history, this document
    r = call("GET", "/metrics")
    assert r.status_code == 200 and "infergate_" in r.text
    call("GET", "/api/metrics/history", query={"seconds": 60})
    call("GET", "/api/metrics/history", query={"seconds": 0})  # 400
    call("GET", "/api/openapi.json", key=infer_key)

    # Workers (this server is a manager with its local engine only)
    call("GET", "/api/workers")
    r = call("POST", "/api/workers/tokens", json_body={"ttl_s": 60})
    assert r.status_code == 201, r.text
    call("DELETE", "/api/workers/tokens/{id}", {"id": r.json()["id"]})
    call("POST", "/api/workers/tokens")
    call("DELETE", "/api/workers/{id}", {"id": "w-nobody"})
    call("POST", "/api/workers/{id}/drain", {"id": "w-nobody"})
    call("POST", "/v2/models/{model}/assign", {"model": "ocr-cls"}, json_body={"ttl_s": 60})

    # OpenAI
    r = call("GET", "/v1/models", key=infer_key)
    assert r.status_code == 200
    r = call("POST", "/v1/completions", json_body={"model": "textgen", "prompt": "The weather",
                                                    "max_tokens": 4}, key=infer_key)
    assert r.status_code == 200, r.text
    r = call("POST", "/v1/completions", json_body={"model": "smollm2", "prompt": "Paris is",
                                                    "max_tokens": 2, "logprobs": 2}, key=infer_key)
    assert r.status_code == 200, r.text
    r = call("POST", "/v1/chat/completions", key=infer_key, json_body={
        "model": "smollm2", "max_tokens": 2, "logprobs": True, "top_logprobs": 2,
        "messages": [{"role": "user", "content": "Say yes."}]})
    assert r.status_code == 200, r.text
    r = call("POST", "/v1/chat/completions", key=infer_key, stream=True, json_body={
        "model": "smollm2", "max_tokens": 2, "stream": True,
        "messages": [{"role": "user", "content": "Say yes."}]})
    assert r.status_code == 200 and b"[DONE]" in r.content
    call("POST", "/v1/chat/completions", key=infer_key, json_body={
        "model": "nothing", "messages": [{"role": "user", "content": "Hi"}]})
    call("POST", "/v1/chat/completions", key=None, json_body={
        "model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]})
    r = call("POST", "/v1/embeddings", key=infer_key, json_body={"model": "embed",
                                                                 "input": ["a cat", "a dog"]})
    assert r.status_code == 200, r.text
    r = call("POST", "/v1/embeddings", key=infer_key, json_body={
        "model": "embed", "input": "a cat", "encoding_format": "base64"})
    assert len(base64.b64decode(r.json()["data"][0]["embedding"])) == 4 * 384

    documented = {(m.upper(), p) for p, item in api.doc["paths"].items() for m in item}
    assert documented - api.called == set(), "documented operations this test never called"
