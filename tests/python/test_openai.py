"""The official `openai` package, unchanged, against infergate's OpenAI-compatible API over
TLS with the server's self-signed certificate: models, completions and chat completions,
streamed and not, seeded determinism, stop sequences, errors, and a client disconnect stopping
generation."""
import json
import os
import re
import ssl
import time
import urllib.request

import httpx2
import openai
import pytest

from conftest import MODELS, start


@pytest.fixture(scope="module")
def textgen():
    g = start([("textgen", "textgen.onnx")],
              extra_args=["--openai-vocab", os.path.join(MODELS, "textgen-vocab.json")])
    yield g
    g.stop()


def client(g, key):
    return openai.OpenAI(base_url=f"{g.url}/v1", api_key=key, max_retries=0,
                         http_client=openai.DefaultHttpxClient(
                             verify=ssl.create_default_context(cafile=g.cert)))


@pytest.fixture(scope="module")
def oc(textgen):
    return client(textgen, textgen.key("infer"))


def test_models_lists_the_completions_model(oc):
    ids = [m.id for m in oc.models.list()]
    assert ids == ["textgen"]


def test_completion_is_seeded_and_counts_usage(oc):
    a = oc.completions.create(model="textgen", prompt="The weather today", max_tokens=24,
                              temperature=0.8, seed=42)
    b = oc.completions.create(model="textgen", prompt="The weather today", max_tokens=24,
                              temperature=0.8, seed=42)
    choice = a.choices[0]
    assert a.object == "text_completion" and a.model == "textgen"
    assert choice.text == b.choices[0].text
    assert choice.finish_reason in ("length", "stop")
    assert a.usage.prompt_tokens == len("The weather today")
    assert a.usage.completion_tokens == len(choice.text) <= 24
    if choice.finish_reason == "length":
        assert a.usage.completion_tokens == 24
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens
    others = {oc.completions.create(model="textgen", prompt="The weather today", max_tokens=24,
                                    temperature=0.8, seed=s).choices[0].text for s in (1, 2, 3)}
    assert len(others | {choice.text}) > 1, "different seeds give different text"


def test_greedy_stop_sequence_cuts_the_text(oc):
    greedy = oc.completions.create(model="textgen", prompt="I love", max_tokens=30,
                                   temperature=0).choices[0].text
    assert len(greedy) >= 6, greedy
    stop = greedy[3:5]
    cut = oc.completions.create(model="textgen", prompt="I love", max_tokens=30,
                                temperature=0, stop=[stop, "\u0000never"])
    assert cut.choices[0].text == greedy[:greedy.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_streamed_completion_matches_the_unstreamed_one(oc):
    args = dict(model="textgen", prompt="Breaking news:", max_tokens=30, temperature=0.9,
                top_p=0.9, seed=7)
    whole = oc.completions.create(**args).choices[0]
    chunks = list(oc.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.finish_reason]
    assert chunks[-1].usage.completion_tokens == len(whole.text)
    assert not chunks[-1].choices


def test_chat_completion_streamed_and_not(oc):
    args = dict(model="textgen", messages=[{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "What is new?"}],
                max_tokens=20, seed=3)
    whole = oc.chat.completions.create(**args)
    assert whole.object == "chat.completion"
    msg = whole.choices[0].message
    assert msg.role == "assistant" and isinstance(msg.content, str)
    assert whole.usage.prompt_tokens == len("Be brief.\nWhat is new?")
    chunks = list(oc.chat.completions.create(stream=True, **args))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == msg.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_raw_stream_ends_with_done(textgen):
    key = textgen.key("infer")
    body = json.dumps({"model": "textgen", "prompt": "Hi", "max_tokens": 5, "stream": True}).encode()
    req = urllib.request.Request(f"{textgen.url}/v1/completions", data=body, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=textgen.cert)
    with urllib.request.urlopen(req, context=ctx, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [l for l in r.read().decode().splitlines() if l.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    for e in events[:-1]:
        json.loads(e[len("data: "):])


def test_errors_map_to_openai_exceptions(textgen, oc):
    with pytest.raises(openai.NotFoundError):
        oc.completions.create(model="gpt-4", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError):
        oc.completions.create(model="textgen", prompt="x", max_tokens=1, n=2)
    with pytest.raises(openai.BadRequestError):
        oc.completions.create(model="textgen", prompt="x", max_tokens=1, temperature=3)
    with pytest.raises(openai.AuthenticationError):
        client(textgen, "ig_0123456789ab_nope").completions.create(model="textgen", prompt="x", max_tokens=1)
    with pytest.raises(openai.PermissionDeniedError):
        client(textgen, textgen.key("upload")).models.list()


def scrape(g):
    req = urllib.request.Request(f"{g.url}/metrics", headers={"Authorization": f"Bearer {g.admin_key}"})
    with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=g.cert), timeout=30) as r:
        return r.read().decode()


def metric(text, name, **labels):
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return 0.0


def test_client_disconnect_stops_generation(textgen):
    key = textgen.key("infer")
    before = metric(scrape(textgen), "infergate_generated_tokens_total", model="textgen", protocol="openai")
    with httpx2.Client(verify=ssl.create_default_context(cafile=textgen.cert), timeout=60) as http:
        with http.stream("POST", f"{textgen.url}/v1/completions",
                         headers={"Authorization": f"Bearer {key}"},
                         # Greedy: this prompt then runs all 3000 tokens (sampled text ends on its
                         # own after a few dozen, which could beat the disconnect).
                         json={"model": "textgen", "prompt": "Once", "max_tokens": 3000,
                               "temperature": 0.0, "stream": True}) as r:
            seen = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    seen += 1
                if seen >= 5:
                    break
    # Connection closed. The generation ends at its next token: wait until none runs.
    deadline = time.monotonic() + 60
    while metric(scrape(textgen), "infergate_generations_in_progress") != 0:
        assert time.monotonic() < deadline, "generation still running after the client left"
        time.sleep(0.1)
    text = scrape(textgen)
    generated = metric(text, "infergate_generated_tokens_total", model="textgen", protocol="openai") - before
    assert 5 <= generated < 3000, generated
    assert metric(text, "infergate_inference_requests_total", model="textgen", protocol="openai",
                  status="499") == 1
