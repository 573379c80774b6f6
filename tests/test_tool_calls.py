"""Tool calling: reading each family's call format, prompting models whose template knows no
tools, and forcing calls by grammar."""
from __future__ import annotations

import json

import pytest

from server_fixtures import *  # noqa: F401,F403  (the chat_server fixture)

from llmpack.runtime.structured.tool_calls import (Tool, ToolCall, forced_grammar, instructions, may_become_call, parse_calls,
                                        render_calls)

NAMES = {"get_weather", "add"}


@pytest.mark.parametrize("text, content, calls", [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     None, [("get_weather", {"city": "Paris"})]),
    ('Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
     '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
     "Let me check.", [("get_weather", {"city": "Oslo"}), ("add", {"a": 1, "b": 2})]),
    ('{"name": "add", "parameters": {"a": 1, "b": 2}}', None, [("add", {"a": 1, "b": 2})]),   # Llama 3.x
    ('<|python_tag|>{"name": "add", "parameters": {"a": 3, "b": 4}}', None, [("add", {"a": 3, "b": 4})]),
    ('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]',
     None, [("add", {"a": 1, "b": 2}), ("get_weather", {"city": "Rome"})]),                  # Mistral
    (' [{"name": "add", "arguments": {"a": 5, "b": 6}}]', None, [("add", {"a": 5, "b": 6})]),  # [TOOL_CALLS] as a control token
    ('Sure:\n```json\n{"name": "add", "arguments": {"a": 1, "b": 1}}\n```', "Sure:", [("add", {"a": 1, "b": 1})]),
    ('{"tool_calls": [{"name": "add", "arguments": "{\\"a\\": 2, \\"b\\": 2}"}]}', None, [("add", {"a": 2, "b": 2})]),
])
def test_parse_each_format(text, content, calls):
    got_content, got = parse_calls(text, NAMES)
    assert got_content == content
    assert [(c.name, json.loads(c.arguments)) for c in got] == calls
    assert all(c.id.startswith("call_") for c in got)


@pytest.mark.parametrize("text", [
    "The weather is nice.",
    '{"name": "unknown_tool", "arguments": {}}',              # not one of the tools
    '<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>',   # broken JSON
    'Use JSON like {"a": 1} here.',
])
def test_plain_text_is_not_a_call(text):
    assert parse_calls(text, NAMES) == (text, [])


def test_streaming_holds_back_only_what_may_be_a_call():
    assert may_become_call("Hello there") == len("Hello there")
    assert may_become_call("Hello <tool") == len("Hello ")
    assert may_become_call("Hello <tool_call>{") == len("Hello ")
    assert may_become_call('{"name"') == 0
    assert may_become_call("Sure.\n[") == len("Sure.\n")


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral"])
def test_rendered_calls_parse_back(fmt):
    calls = [ToolCall("add", '{"a": 1, "b": 2}'), ToolCall("get_weather", '{"city": "Paris"}')]
    _, back = parse_calls(render_calls(calls, fmt), NAMES)
    assert [(c.name, json.loads(c.arguments)) for c in back] == [(c.name, json.loads(c.arguments)) for c in calls]


def test_instructions_name_every_tool():
    tools = [Tool("add", "Add two numbers", {"type": "object"}), Tool("get_weather", "", {})]
    text = instructions(tools, "hermes", parallel=False)
    assert '"name": "add"' in text and "get_weather" in text and "<tool_call>" in text


def test_forced_grammar_asks_for_the_models_own_marker_tokens():
    """A marker that is one token in the model's vocabulary is asked for as that token (what
    the model writes unforced), and a newline after the last call may end the text."""
    tools = [Tool("f", "", {"type": "object"})]
    hermes = forced_grammar(tools, "hermes", True, {"<tool_call>": 7, "</tool_call>": 8})
    assert hermes.splitlines()[0] == ('root ::= <[7]> "\\n" call "\\n" <[8]> ( "\\n" <[7]> "\\n" call "\\n" <[8]> )* '
                                      '"\\n"?')
    assert forced_grammar(tools, "mistral", False, {"[TOOL_CALLS]": 9}).startswith('root ::= <[9]> " "? "[" call "]"')
    assert forced_grammar(tools, "hermes", False).startswith('root ::= "<tool_call>" "\\n" call "\\n" "</tool_call>" "\\n"?')


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral"])
def test_forced_grammar_parses_in_llama(fmt, tiny_model):
    from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
    from llmpack.runtime.llm import collect
    from llmpack.runtime.engine.sampling_params import SamplingParams

    tools = [Tool("add", "", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                              "required": ["a", "b"]}),
             Tool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                                      "required": ["city"]})]
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=1024, max_num_seqs=4))
    try:
        for parallel in (False, True):
            gbnf = forced_grammar(tools, fmt, parallel)
            for seed in (1, 2, 3):
                out = collect(eng.add_request("Call:", SamplingParams(grammar=gbnf, max_tokens=64, temperature=1.0,
                                                                      seed=seed))).outputs[0]
                content, calls = parse_calls(out.text, {"add", "get_weather"})
                assert calls and content is None, out.text
                assert parallel or len(calls) == 1
                for c in calls:
                    args = json.loads(c.arguments)
                    assert set(args) == ({"a", "b"} if c.name == "add" else {"city"})
    finally:
        eng.shutdown()


# ---- through the server, on models whose reply is known ---------------------------------------------
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
CALL_REPLY = ["Let me check.", "\n<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
              "\n</tool_call>"]
# A template that renders tools itself, the way Qwen's and Hermes' do.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} {{ c.function.arguments | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def caller(tmp_path_factory):
    from server_fixtures import live_server, write_scripted_model

    path = write_scripted_model(tmp_path_factory.mktemp("caller") / "caller.gguf", reply=CALL_REPLY)
    with live_server(path) as srv:
        yield srv


def test_auto_tool_call_is_read_back(caller):
    r = caller.openai().chat.completions.create(model=caller.model_id, messages=[{"role": "user", "content": "hi"}],
                                                tools=[WEATHER], max_tokens=20)
    (c,) = r.choices
    assert c.finish_reason == "tool_calls" and c.message.content == "Let me check."
    (call,) = c.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}


def test_auto_tool_call_streams_text_then_the_call(caller):
    deltas, calls, reasons = [], [], []
    for chunk in caller.openai().chat.completions.create(
            model=caller.model_id, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER], max_tokens=20,
            stream=True):
        for c in chunk.choices:
            if c.delta.content:
                deltas.append(c.delta.content)
            calls += c.delta.tool_calls or []
            reasons += [c.finish_reason] if c.finish_reason else []
    assert "".join(deltas).strip() == "Let me check." and "<tool_call>" not in "".join(deltas)
    assert reasons == ["tool_calls"] and [c.function.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"} and calls[0].index == 0


def test_without_tools_the_same_text_is_content(caller):
    r = caller.openai().chat.completions.create(model=caller.model_id, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=20)
    assert r.choices[0].finish_reason == "stop" and "<tool_call>" in r.choices[0].message.content
    r = caller.openai().chat.completions.create(model=caller.model_id, messages=[{"role": "user", "content": "hi"}],
                                                tools=[WEATHER], tool_choice="none", max_tokens=20)
    assert r.choices[0].message.tool_calls is None


def test_native_template_renders_tools_and_history(tiny_model_factory):
    from server_fixtures import live_server

    from llmpack.runtime.core.plan import OutputPlan, supports_tools
    from llmpack.runtime.chat import untrusted
    from llmpack.runtime.core.prompt import render_messages

    assert supports_tools(TOOL_TEMPLATE) and not supports_tools("{% for m in messages %}{{ m.content }}{% endfor %}")
    with live_server(tiny_model_factory(chat_template=TOOL_TEMPLATE)) as srv:
        model = srv.state.model
        history = [{"role": "user", "content": "Weather?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                     "arguments": '{"city": "Paris"}'}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        plan = OutputPlan(tools=[Tool("get_weather", "", {})], tool_choice="auto", native=True)
        text = untrusted.clean(render_messages(model, history, plan))   # tool results arrive marked as text
        assert "Tools: get_weather" in text
        assert '<tool_call>get_weather {"city": "Paris"}</tool_call>' in text   # arguments as an object
        assert "<|im_start|>tool\nsunny" in text
        r = srv.openai().chat.completions.create(model=srv.model_id, messages=history, tools=[WEATHER],
                                                 tool_choice="required", max_tokens=60)
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_history_without_native_tools_becomes_text(chat_server):
    from llmpack.runtime.core.plan import OutputPlan
    from llmpack.runtime.chat import untrusted
    from llmpack.runtime.core.prompt import render_messages

    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "rain"},
               {"role": "user", "content": "Umbrella?"}]
    text = untrusted.clean(render_messages(chat_server.state.model, history,
                                           OutputPlan(tools=[Tool("get_weather", "", {})], tool_choice="auto")))
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert "<tool_response>\nrain\n</tool_response>\n\nUmbrella?" in text     # result merged into the user turn
    assert text.index("get_weather") < text.index("Weather?")                  # the tool list is in the system turn


def test_legacy_functions_are_tools(caller):
    r = caller.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20,
                                             "functions": [WEATHER["function"]], "function_call": "auto"}).json()
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    bad = caller.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                               "functions": [WEATHER["function"]], "tools": [WEATHER]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "functions"


def test_named_choice_forces_that_tool_but_shows_all(chat_server):
    add = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
    client = chat_server.openai()
    kw = dict(model=chat_server.model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=80, seed=3)
    r = client.chat.completions.create(tools=[WEATHER, add], tool_choice={"type": "function", "function": {"name": "add"}},
                                       **kw)
    (call,) = r.choices[0].message.tool_calls[:1]
    assert call.function.name == "add" and set(json.loads(call.function.arguments)) == {"a", "b"}
    alone = client.chat.completions.create(tools=[add], tool_choice={"type": "function", "function": {"name": "add"}},
                                           **kw)
    assert r.usage.prompt_tokens > alone.usage.prompt_tokens     # get_weather was in the prompt too
