"""JSON mode, JSON schemas, grammars and tool calls through the official `openai` SDK against
`llmpack run` on the real demo model (Gemma 3 270M, a *base* model: whatever structure its
output has, the grammar put there)."""
from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from server_fixtures import LiveServer
from test_server import metric_samples

pytestmark = pytest.mark.demo

RECIPE = {"type": "object", "additionalProperties": False, "required": ["title", "minutes", "steps"],
          "properties": {"title": {"type": "string", "maxLength": 40},
                         "minutes": {"type": "integer"},
                         "vegetarian": {"type": "boolean"},
                         "steps": {"type": "array", "items": {"type": "string", "maxLength": 60},
                                   "minItems": 1, "maxItems": 3}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
ASK = [{"role": "user", "content": "Give me a pancake recipe as JSON."}]


def client(srv: LiveServer) -> openai.OpenAI:
    return srv.openai().with_options(timeout=900)   # 2 busy cores: slow, not stuck


def chat(srv: LiveServer, **kw):
    kw.setdefault("messages", ASK)
    kw.setdefault("max_tokens", 60)
    return client(srv).chat.completions.create(model=srv.model_id, **kw)


# ---- JSON mode and JSON schema ---------------------------------------------------------------------
def test_json_object_mode(demo_server: LiveServer):
    r = chat(demo_server, response_format={"type": "json_object"}, temperature=0.7, seed=3, n=2)
    for c in r.choices:
        assert isinstance(json.loads(c.message.content), dict), c.message.content


@pytest.mark.parametrize("max_tokens", [40, 100])
def test_json_schema_validates_greedy_and_sampled(demo_server: LiveServer, max_tokens):
    fmt = {"type": "json_schema", "json_schema": {"name": "recipe", "schema": RECIPE, "strict": True}}
    for temperature in (0.0, 1.0):
        r = chat(demo_server, response_format=fmt, temperature=temperature, seed=11, max_tokens=max_tokens)
        (c,) = r.choices
        jsonschema.validate(json.loads(c.message.content), RECIPE)
        assert c.finish_reason in ("stop", "length")


def test_json_schema_streamed_with_n(demo_server: LiveServer):
    fmt = {"type": "json_schema", "json_schema": {"name": "recipe", "schema": RECIPE}}
    texts: dict[int, str] = {}
    for chunk in chat(demo_server, response_format=fmt, stream=True, n=3, temperature=0.9, seed=5,
                      stream_options={"include_usage": True}):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
    assert sorted(texts) == [0, 1, 2]
    for text in texts.values():
        jsonschema.validate(json.loads(text), RECIPE)


def test_completions_take_schema_and_llama_server_fields(demo_server: LiveServer):
    c = client(demo_server)
    r = c.completions.create(model=demo_server.model_id, prompt="A recipe in JSON:", max_tokens=60, temperature=0,
                                  extra_body={"response_format": {"type": "json_schema",
                                                                  "json_schema": {"schema": RECIPE}}})
    jsonschema.validate(json.loads(r.choices[0].text), RECIPE)
    r = c.completions.create(model=demo_server.model_id, prompt="Answer:", max_tokens=40,
                                  extra_body={"json_schema": {"type": "array", "items": {"type": "integer"},
                                                              "minItems": 2, "maxItems": 4}})
    assert 2 <= len(json.loads(r.choices[0].text)) <= 4
    r = c.chat.completions.create(model=demo_server.model_id, messages=ASK, max_tokens=20,
                                       extra_body={"grammar": 'root ::= ("yes" | "no") "."'})
    assert r.choices[0].message.content in ("yes.", "no.")


@pytest.mark.parametrize("extra, param, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "strnig"}}}},
     "response_format", "strnig"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "schema"),
    ({"response_format": {"type": "xml"}}, "response_format", "xml"),
    ({"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}}, "json_schema", "nope"),
    ({"grammar": "root ::= greeting"}, "grammar", "greeting"),
    ({"grammar": "root ::= root \"x\""}, "grammar", "left-recursive"),
    ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar", "only one"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "cannot be combined"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools", "name"),
])
def test_bad_schemas_and_grammars_are_400(demo_server: LiveServer, extra, param, words):
    with pytest.raises(openai.BadRequestError) as info:
        chat(demo_server, max_tokens=5, extra_body=extra)
    err = info.value.body
    assert err["param"] == param and words in err["message"], err


# ---- tools ------------------------------------------------------------------------------------------
def test_required_tool_call_on_a_template_without_tools(demo_server: LiveServer):
    """Gemma's template (the recipe's) knows no tools: the tool list goes into the prompt and
    the grammar forces a well-formed call whose arguments match the schema."""
    for temperature in (0.0, 1.0):
        r = chat(demo_server, messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                 tools=[WEATHER, ADD], tool_choice="required", temperature=temperature, seed=2, max_tokens=80)
        (c,) = r.choices
        assert c.finish_reason == "tool_calls" and c.message.tool_calls, c.message
        for call in c.message.tool_calls:
            assert call.type == "function" and call.id.startswith("call_")
            schema = {"get_weather": WEATHER, "add": ADD}[call.function.name]["function"]["parameters"]
            jsonschema.validate(json.loads(call.function.arguments), schema)


def test_named_tool_choice_and_no_parallel_calls(demo_server: LiveServer):
    r = chat(demo_server, messages=[{"role": "user", "content": "2+3?"}], tools=[WEATHER, ADD], parallel_tool_calls=False,
             tool_choice={"type": "function", "function": {"name": "add"}}, temperature=0.0, max_tokens=60)
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "add"
    assert set(json.loads(call.function.arguments)) == {"a", "b"}


def test_streamed_tool_calls(demo_server: LiveServer):
    calls, reasons = {}, []
    for chunk in chat(demo_server, messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=[WEATHER],
                      tool_choice="required", stream=True, max_tokens=80, temperature=0):
        for c in chunk.choices:
            assert not c.delta.content
            for tc in c.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert reasons == ["tool_calls"] and calls
    for entry in calls.values():
        assert entry["name"] == "get_weather" and entry["id"].startswith("call_")
        jsonschema.validate(json.loads(entry["arguments"]), WEATHER["function"]["parameters"])


def test_tool_results_in_the_history(demo_server: LiveServer):
    history = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
        {"role": "user", "content": "And in words?"},
    ]
    r = chat(demo_server, messages=history, tools=[WEATHER], tool_choice="none", max_tokens=10, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.tool_calls is None
    prompt = r.usage.prompt_tokens
    r = chat(demo_server, messages=history, tools=[WEATHER], max_tokens=10, temperature=0)   # auto: the tools join the prompt
    assert r.usage.prompt_tokens > prompt


def test_constrained_requests_are_counted(demo_server: LiveServer):
    before = metric_samples(demo_server.url)
    chat(demo_server, response_format={"type": "json_object"}, max_tokens=30)
    chat(demo_server, tools=[ADD], tool_choice="required", max_tokens=60)
    after = metric_samples(demo_server.url)
    key = 'llmpack:constrained_requests_total{"kind": "%s"}'
    assert after[key % "json_object"] - before.get(key % "json_object", 0) == 1
    assert after[key % "tools"] - before.get(key % "tools", 0) == 1
