"""The official `openai` package against a real chat model: SmolLM2-135M-Instruct (GGUF, Q4_1)
served by infergate through llama.cpp with continuous batching. Factual answers, structured
output under a JSON schema, n choices, log probabilities, seeded repeats, streaming with usage,
16 concurrent streams equal to their runs alone, cancellation freeing the sequence, errors, and a
bad GGUF upload refused. Generations are kept short (max_tokens small) so the file runs in
seconds on two cores."""
import concurrent.futures
import json
import os
import ssl
import time
import urllib.error
import urllib.request

import httpx2
import openai
import pytest

from conftest import MODELS, start
from test_openai import client, metric, scrape

CAPITAL = [{"role": "user", "content": "What is the capital city of France? Answer in one word."}]


@pytest.fixture(scope="module")
def llm():
    # 4 sequences: the 16-stream test then also exercises the queue (12 wait for a slot).
    # 1 thread: CI runs several test processes on 2 cores, and 2 llama.cpp threads there stall
    # for seconds per token (their barriers wait for each other; see docs/src/chat-models.md, "Settings").
    g = start([("smollm2", "smollm2.gguf")],
              extra_args=["--llm-max-sequences", "4", "--llm-context", "1024", "--llm-threads", "1"])
    yield g
    g.stop()


@pytest.fixture(scope="module")
def oc(llm):
    return client(llm, llm.key("infer"))


def test_models_lists_the_chat_model(oc):
    models = oc.models.list().data
    assert models[0].id == "smollm2"
    assert models[0].model_extra["max_model_len"] == 1024


def test_capital_of_france_at_temperature_0(oc):
    r = oc.chat.completions.create(model="smollm2", messages=CAPITAL, temperature=0, max_tokens=16)
    choice = r.choices[0]
    assert "Paris" in choice.message.content, choice.message.content
    assert choice.finish_reason == "stop"
    assert r.object == "chat.completion" and r.model == "smollm2"
    # Real tokens: the chat template's system prompt and markers are counted too.
    assert 30 < r.usage.prompt_tokens < 80, r.usage
    assert 1 <= r.usage.completion_tokens <= 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_json_schema_output_parses_and_validates(oc):
    schema = {"type": "object",
              "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = oc.chat.completions.create(
        model="smollm2", temperature=0, max_tokens=48,
        messages=[{"role": "user", "content": "Name the capital of France and its country as JSON."}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "capital", "schema": schema, "strict": True}})
    answer = json.loads(r.choices[0].message.content)
    assert set(answer) == {"city", "country"}
    assert all(isinstance(v, str) for v in answer.values())
    r = oc.chat.completions.create(model="smollm2", max_tokens=48, seed=5,
                                   messages=[{"role": "user", "content": "Describe Paris in JSON."}],
                                   response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_n_choices_logprobs_and_seeded_repeats(oc):
    args = dict(model="smollm2", messages=[{"role": "user", "content": "Tell me a fact about cats."}],
                max_tokens=12, temperature=1.0, seed=11, n=2, logprobs=True, top_logprobs=3)
    a = oc.chat.completions.create(**args)
    b = oc.chat.completions.create(**args)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert a.usage.completion_tokens == sum(len(c.logprobs.content) for c in a.choices)
    for c in a.choices:
        assert "".join(t.token for t in c.logprobs.content).startswith(c.message.content[:1])
        for t in c.logprobs.content:
            assert t.logprob <= 0 and len(t.top_logprobs) == 3
            assert t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob
    others = {oc.chat.completions.create(**{**args, "seed": s, "n": 1}).choices[0].message.content
              for s in (1, 2, 3)}
    assert len(others) > 1, "different seeds give different text"


def test_streaming_with_usage_matches_the_whole_answer(oc):
    args = dict(model="smollm2", messages=CAPITAL, temperature=0, max_tokens=16)
    whole = oc.chat.completions.create(**args)
    chunks = list(oc.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]


def test_completions_stop_and_length(oc):
    r = oc.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=5,
                              temperature=0, logprobs=2)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    assert len(r.choices[0].logprobs.tokens) == 5
    assert "".join(r.choices[0].logprobs.tokens) == r.choices[0].text
    cut = r.choices[0].text.strip().split()[0]
    s = oc.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=5,
                              temperature=0, stop=[cut])
    assert cut not in s.choices[0].text and s.choices[0].finish_reason == "stop"


def common_prefix(a, b):
    return len(os.path.commonprefix([a, b]))


def test_sixteen_concurrent_streams_equal_their_runs_alone(oc, llm):
    prompts = [f"Count from {i} to {i + 3}." for i in range(16)]

    def run(prompt, stream):
        args = dict(model="smollm2", messages=[{"role": "user", "content": prompt}],
                    temperature=0, max_tokens=10)
        if not stream:
            return oc.chat.completions.create(**args).choices[0].message.content
        return "".join(c.choices[0].delta.content or "" for c in
                       oc.chat.completions.create(stream=True, **args) if c.choices)

    alone = [run(p, False) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: run(p, True), prompts))
    assert all(together), together
    # Batched decoding is not bit-identical to decoding alone: llama.cpp's matrix products take
    # other kernel paths (and quantise activations in other blocks) when a batch holds several
    # sequences, so a near tie between two greedy candidates can flip. CI saw 2 of 16 differ
    # ("12 + 1 = 13" vs "12 + 12 = 24"). What must hold is that no stream receives another's
    # tokens: each answer shares a longer start with its own run alone than with any other run.
    for i, text in enumerate(together):
        own = common_prefix(text, alone[i])
        others = max(common_prefix(text, a) for j, a in enumerate(alone) if a != alone[i])
        assert own >= 1 and own > others, (i, text, alone[i], alone)
    same = sum(a == t for a, t in zip(alone, together))
    print(f"batched equal to alone: {same}/16")
    assert same >= 8, list(zip(alone, together))
    assert metric(scrape(llm), "infergate_llm_num_requests_running", model="smollm2") == 0


def test_cancel_frees_the_sequence(llm):
    key = llm.key("infer")
    running = lambda: metric(scrape(llm), "infergate_llm_num_requests_running", model="smollm2")
    generated = lambda: metric(scrape(llm), "infergate_llm_generation_tokens_total", model="smollm2")
    with httpx2.Client(verify=ssl.create_default_context(cafile=llm.cert), timeout=60) as http:
        with http.stream("POST", f"{llm.url}/v1/completions", headers={"Authorization": f"Bearer {key}"},
                         # Greedy counting goes on to max_tokens (a story may end early, at EOS).
                         json={"model": "smollm2", "prompt": ", ".join(map(str, range(1, 40))) + ",",
                               "max_tokens": 800, "temperature": 0.0, "stream": True}) as r:
            assert r.status_code == 200, r.read()
            seen = 0
            lines = r.iter_lines()
            for line in lines:
                seen += line.startswith("data: ")
                assert '"finish_reason":null' in line or not line.startswith("data: "), line
                if seen >= 3:
                    break
            # The sequence is generating while the client holds the stream.
            before = generated()
            deadline = time.monotonic() + 10
            while generated() <= before or running() != 1:
                if time.monotonic() > deadline:
                    # Say whether the stream itself went on, what the gauges said and what the server
                    # logged (2 llama.cpp threads on a loaded machine stalled here; now 1).
                    more, t = 0, time.monotonic()
                    for line in lines:
                        more += line.startswith("data: ")
                        if time.monotonic() - t > 3:
                            break
                    gauges = [m for m in scrape(llm).splitlines() if m.startswith("infergate_llm_")]
                    logs = []
                    while not llm.lines.empty():
                        logs.append(llm.lines.get())
                    pytest.fail(f"no progress seen while the stream was open: {more} more chunks in "
                                f"3 s; {gauges}; log tail: {''.join(logs[-20:])}")
                time.sleep(0.05)
    deadline = time.monotonic() + 30
    while running() != 0:
        assert time.monotonic() < deadline, "sequence still running after the client left"
        time.sleep(0.05)
    # Freed: no more tokens for the stream that was left (800 would take seconds).
    stopped = generated()
    time.sleep(0.5)
    assert generated() == stopped
    assert metric(scrape(llm), "infergate_inference_requests_total", model="smollm2", status="499") >= 1


def test_prefix_cache_hits_are_counted(oc, llm):
    system = {"role": "system", "content": "You answer questions about geography. " * 20}
    before = metric(scrape(llm), "infergate_llm_prefix_cache_hits_total", model="smollm2")
    for q in ("Where is Paris?", "Where is Rome?"):
        oc.chat.completions.create(model="smollm2", messages=[system, {"role": "user", "content": q}],
                                   max_tokens=2, temperature=0)
    hits = metric(scrape(llm), "infergate_llm_prefix_cache_hits_total", model="smollm2") - before
    assert hits >= 100, hits


def test_errors_map_to_openai_exceptions(oc):
    with pytest.raises(openai.NotFoundError):
        oc.chat.completions.create(model="gpt-4", messages=CAPITAL)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        oc.chat.completions.create(model="smollm2", messages=CAPITAL, temperature=3)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        oc.chat.completions.create(model="smollm2", messages=CAPITAL, logprobs=True, top_logprobs=30)
    with pytest.raises(openai.BadRequestError, match=r"maximum context length is 1024 tokens.*\d+ in the prompt"):
        oc.completions.create(model="smollm2", prompt="word " * 1100, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="messages\\[0\\].role"):
        oc.chat.completions.create(model="smollm2", messages=[{"role": "wizard", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="priority"):
        oc.chat.completions.create(model="smollm2", messages=CAPITAL, extra_body={"priority": "high"})
    # vLLM's priority field is accepted (its ordering is tested in llm/tests/llm/engine.rs).
    r = oc.chat.completions.create(model="smollm2", messages=CAPITAL, max_tokens=2, extra_body={"priority": -3})
    assert r.usage.completion_tokens >= 1


def upload(g, name, data):
    req = urllib.request.Request(f"{g.url}/api/models/{name}/versions", data=data, method="POST",
                                 headers={"Authorization": f"Bearer {g.admin_key}"})
    ctx = ssl.create_default_context(cafile=g.cert)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_bad_gguf_upload_is_refused_and_leaves_nothing(llm):
    with open(os.path.join(MODELS, "smollm2.gguf"), "rb") as f:
        head = f.read(1 << 20)
    files_before = sorted(os.listdir(os.path.join(llm.data, "models")))
    status, body = upload(llm, "broken", head)
    assert status == 400 and "truncated" in body["error"], body
    status, body = upload(llm, "broken", b"GGUF" + bytes([9, 0, 0, 0]) + bytes(64))
    assert status == 400 and "version 9" in body["error"], body
    assert sorted(os.listdir(os.path.join(llm.data, "models"))) == files_before
    status, _ = upload(llm, "broken", b"")
    assert status == 400
    req = urllib.request.Request(f"{llm.url}/api/models/broken",
                                 headers={"Authorization": f"Bearer {llm.admin_key}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, context=ssl.create_default_context(cafile=llm.cert), timeout=30)
    assert e.value.code == 404
