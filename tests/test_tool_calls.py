"""Tool calling: reading each family's call format, prompting models whose template knows no
tools, and forcing calls by grammar."""
from __future__ import annotations

import json

import pytest

from llmpack.runtime.tool_calls import (Tool, ToolCall, forced_grammar, instructions, may_become_call, parse_calls,
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


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral"])
def test_forced_grammar_parses_in_llama(fmt, tiny_model):
    from llmpack.runtime.engine import EngineConfig, LLMEngine
    from llmpack.runtime.llm import collect
    from llmpack.runtime.sampling_params import SamplingParams

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
