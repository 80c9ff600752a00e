"""The official `openai` package against a chat model's tool calling, Predicted Outputs and
embeddings (SmolLM2-135M-Instruct, GGUF): a forced call parsed by the client into
`tool_calls`, a two-turn loop with the tool's result, streamed `tool_calls` deltas reassembled
by hand equal to the whole answer, a prediction that keeps the greedy answer and reports its
accepted tokens, vectors from the GGUF model, and refusals as the client's exceptions."""
import json
import math

import openai
import pytest

from conftest import start
from test_openai import client

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def oc():
    g = start([("smollm2", "smollm2.gguf")],
              extra_args=["--llm-max-sequences", "4", "--llm-context", "1024", "--llm-threads", "1"])
    yield client(g, g.key("infer"))
    g.stop()


def test_a_forced_call_then_the_answer_from_its_result(oc):
    # One call: allowed several, a small model repeats its call until max_tokens.
    r = oc.chat.completions.create(model="smollm2", messages=ASK, tools=[WEATHER],
                                   tool_choice="required", parallel_tool_calls=False,
                                   temperature=0, max_tokens=64)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    # The client sends the assistant message back as it received it, then the tool's result.
    messages = ASK + [choice.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny", "c": 21}'}]
    r = oc.chat.completions.create(model="smollm2", messages=messages, tools=[WEATHER],
                                   tool_choice="none", temperature=0, max_tokens=24)
    assert r.choices[0].message.content
    assert not r.choices[0].message.tool_calls


def test_streamed_deltas_add_up_to_the_whole_call(oc):
    kwargs = dict(model="smollm2", messages=ASK, tools=[WEATHER], temperature=0, max_tokens=64,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    whole = oc.chat.completions.create(**kwargs).choices[0].message.tool_calls
    calls, finish = {}, None
    for chunk in oc.chat.completions.create(stream=True, **kwargs):
        choice = chunk.choices[0]
        for d in choice.delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
            entry["name"] += d.function.name or ""
            entry["arguments"] += d.function.arguments or ""
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == \
        [(c.function.name, c.function.arguments) for c in whole]


def test_a_prediction_keeps_the_answer_and_reports_accepted_tokens(oc):
    listing = "Repeat this list exactly, one item per line:\napples\nbananas\ncherries\ndates"
    messages = [{"role": "user", "content": listing}]
    plain = oc.chat.completions.create(model="smollm2", messages=messages, temperature=0,
                                       max_tokens=32, extra_body={"speculation": {"enabled": False}})
    text = plain.choices[0].message.content
    predicted = oc.chat.completions.create(model="smollm2", messages=messages, temperature=0,
                                           max_tokens=32, prediction={"type": "content", "content": text})
    assert predicted.choices[0].message.content == text
    assert predicted.usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_embeddings_from_the_gguf_model(oc):
    data = oc.embeddings.create(model="smollm2", input=["a cat", "a dog", "stocks fell"]).data
    assert [d.index for d in data] == [0, 1, 2]
    for d in data:
        assert len(d.embedding) == 576
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-4
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        oc.embeddings.create(model="smollm2", input="x", dimensions=64)


def test_bad_tools_are_the_clients_errors(oc):
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\] \('bad name!'\)"):
        oc.chat.completions.create(model="smollm2", messages=ASK,
                                   tools=[{"type": "function", "function": {"name": "bad name!"}}])
    with pytest.raises(openai.BadRequestError, match="no tool is named 'nope'"):
        oc.chat.completions.create(model="smollm2", messages=ASK, tools=[WEATHER],
                                   tool_choice={"type": "function", "function": {"name": "nope"}})
