"""Token limits per key with the official `openai` package against the real chat model
(SmolLM2, GGUF): a key with tokens per minute and another with a daily budget are admitted
until the limit is spent, then refused with `RateLimitError` (429, `Retry-After`, OpenAI's
error body naming the limit, the token policy's RateLimit fields); streams are charged their
real tokens, as the key's usage shows."""
import json
import ssl
import urllib.request

import openai
import pytest

from conftest import start
from test_openai import client


@pytest.fixture(scope="module")
def llm():
    g = start([("smollm2", "smollm2.gguf")],
              extra_args=["--llm-max-sequences", "2", "--llm-context", "1024", "--llm-threads", "1"])
    yield g
    g.stop()


HELLO = [{"role": "user", "content": "Say hello."}]


def usage_of(g, key_id):
    admin = open(f"{g.data}/admin.key").read().strip()
    req = urllib.request.Request(f"{g.url}/api/keys/{key_id}/usage",
                                 headers={"Authorization": f"Bearer {admin}"})
    ctx = ssl.create_default_context(cafile=g.cert)
    with urllib.request.urlopen(req, context=ctx) as r:
        return json.load(r)


def key_id(secret):
    return secret.split("_")[1]


def test_tokens_per_minute_admits_then_refuses_with_openai_errors(llm):
    oc = client(llm, llm.key("infer", "--tokens-per-minute", "300"))
    first = oc.chat.completions.with_raw_response.create(model="smollm2", messages=HELLO,
                                                         temperature=0, max_tokens=8)
    assert first.headers["x-infergate-model-version"] == "1"
    assert '"tokens-per-minute";q=300;w=60' in first.headers["ratelimit-policy"]
    prompt = first.parse().usage.prompt_tokens
    # A whole minute's tokens (its prompt plus the rest) cannot be reserved until the first
    # request's have flowed back.
    with pytest.raises(openai.RateLimitError) as refused:
        oc.chat.completions.create(model="smollm2", messages=HELLO, temperature=0,
                                   max_tokens=300 - prompt)
    e = refused.value
    assert e.status_code == 429
    assert e.code == "rate_limit_exceeded"
    assert "tokens_per_minute 300" in e.message
    assert 1 <= int(e.response.headers["retry-after"]) <= 60
    assert '"tokens-per-minute";r=' in e.response.headers["ratelimit"]


def test_a_daily_budget_is_spent_by_streams_and_answers_then_refused(llm):
    secret = llm.key("infer", "--token-budget", "400/day")
    oc = client(llm, secret)
    streamed = 0
    stream = oc.chat.completions.create(model="smollm2", messages=HELLO, temperature=0, max_tokens=16,
                                        stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage:
            streamed = chunk.usage.total_tokens
    assert streamed > 0
    usage = usage_of(llm, key_id(secret))
    today = usage["tokens"]["today"]
    assert today[0]["model"] == "smollm2"
    assert today[0]["prompt_tokens"] + today[0]["completion_tokens"] == streamed
    spent = streamed
    for _ in range(40):
        try:
            r = oc.chat.completions.create(model="smollm2", messages=HELLO, temperature=0, max_tokens=16)
            spent += r.usage.total_tokens
        except openai.RateLimitError as e:
            assert e.code == "insufficient_quota"
            assert "next UTC day" in e.message
            assert '"token-budget";q=400;w=86400' in e.response.headers["ratelimit-policy"]
            break
    else:
        pytest.fail("the budget never ran out")
    assert spent <= 400
    usage = usage_of(llm, key_id(secret))
    total = sum(m["prompt_tokens"] + m["completion_tokens"] for m in usage["tokens"]["today"])
    assert total == spent
    assert usage["tokens"]["budget"]["remaining"] == 400 - spent
