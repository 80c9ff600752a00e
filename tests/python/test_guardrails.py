"""The official `openai` package against chat guardrails on the demo chat model
(SmolLM2-135M-Instruct, GGUF): the example guardrails added as plugins and attached to the
model, an e-mail address masked before the model reads it, a blocked term refused as the
client's `BadRequestError` with the code `content_filter`, a stream the guardrail cuts
short with the finish reason `content_filter`, and a key's own guardrail refusing for that key
only."""
import json
import os
import ssl
import urllib.request

import openai
import pytest

from conftest import ROOT, start
from test_openai import client

DIST = os.environ.get("INFERGATE_PLUGIN_DIST", os.path.join(ROOT, "plugins", "dist"))


@pytest.fixture(scope="module")
def guarded():
    g = start([("smollm2", "smollm2.gguf")],
              extra_args=["--llm-max-sequences", "2", "--llm-context", "512", "--llm-threads", "1"])
    yield g
    g.stop()


def api(g, method, path, body):
    request = urllib.request.Request(f"{g.url}{path}", data=body, method=method,
                                     headers={"Authorization": f"Bearer {g.admin_key}"})
    context = ssl.create_default_context(cafile=g.cert)
    with urllib.request.urlopen(request, context=context) as answer:
        return json.loads(answer.read())


def upload(g):
    for name in ("pii-mask", "blocked-terms"):
        with open(os.path.join(DIST, f"{name}.wasm"), "rb") as f:
            assert api(g, "POST", "/api/plugins", f.read())["kind"] == "guardrail"


def attach(g, guardrails):
    upload(g)
    body = json.dumps({"guardrails": guardrails}).encode()
    assert len(api(g, "PUT", "/api/models/smollm2/guardrails", body)["guardrails"]) == len(guardrails)


def ask(oc, content, **kwargs):
    return oc.chat.completions.create(model="smollm2", temperature=0, max_tokens=16,
                                      messages=[{"role": "user", "content": content}], **kwargs)


def test_masking_and_refusals_as_the_client_sees_them(guarded):
    oc = client(guarded, guarded.key("infer"))
    raw = "Write to jane.doe@example.com about the zebra. Say hello."
    masked = "Write to [EMAIL] about the zebra. Say hello."
    before = ask(oc, masked)
    attach(guarded, [{"plugin": "pii-mask"}])
    after = ask(oc, raw)
    assert after.usage.prompt_tokens == before.usage.prompt_tokens
    assert after.choices[0].message.content == before.choices[0].message.content

    attach(guarded, [{"plugin": "pii-mask"}, {"plugin": "blocked-terms", "config": {"terms": ["zebra"]}}])
    with pytest.raises(openai.BadRequestError) as refused:
        ask(oc, raw)
    assert refused.value.code == "content_filter"
    assert "blocked-terms" in refused.value.message

    # A word of the greedy answer, blocked: the stream ends with content_filter without it.
    prompt = "Describe the sea in one sentence."
    answer = ask(oc, prompt).choices[0].message.content
    word = next(w for w in answer.replace(",", " ").replace(".", " ").split()
                if len(w) >= 5 and w.isalpha() and w.lower() not in prompt.lower())
    attach(guarded, [{"plugin": "blocked-terms", "config": {"terms": [word]}}])
    text, finish = "", None
    for chunk in ask(oc, prompt, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "content_filter"
    assert word not in text and answer.startswith(text)


def test_a_keys_own_guardrails_refuse_for_that_key_only(guarded):
    upload(guarded)
    api(guarded, "DELETE", "/api/models/smollm2/guardrails", None)
    secret = guarded.key("infer")
    public_id = secret.split("_")[1]
    body = json.dumps({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["zebra"]}}]})
    shown = api(guarded, "PUT", f"/api/keys/{public_id}/guardrails", body.encode())
    assert shown["public_id"] == public_id and shown["guardrails"][0]["plugin"] == "blocked-terms"
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client(guarded, secret), "Tell me about the zebra.")
    assert refused.value.code == "content_filter"
    assert "blocked-terms" in refused.value.message
    other = ask(client(guarded, guarded.key("infer")), "Tell me about the zebra.")
    assert other.choices[0].message.content
