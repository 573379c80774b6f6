"""The instruct demo model (Qwen2.5-Coder 0.5B Instruct, the default `llmpack demo`) through the
official OpenAI SDK, as a new user's app would use it: a chat reply with no template tokens
leaking, a tool round trip in Qwen's own (Hermes) format, a JSON-schema reply that validates,
forced tool calls that say what `auto` says, and a PDF sent as a `file` part.

Greedy decoding (temperature 0) keeps the answers stable; each assertion checks what even a
0.5B model gets right (a capital, a number from the prompt), never its wording."""
from __future__ import annotations

import json

import jsonschema
import pytest

from doc_files import make_pdf
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

pytestmark = pytest.mark.instruct

LEAKS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"]}}}

# What instructor's TOOLS mode and LangChain's with_structured_output send for a pydantic model
PERSON = {"type": "function", "function": {
    "name": "Person", "description": "Correctly extracted `Person` with all the required parameters with correct types",
    "parameters": {"properties": {"name": {"title": "Name", "type": "string"}, "age": {"title": "Age", "type": "integer"}},
                   "required": ["name", "age"], "title": "Person", "type": "object"}}}
EXTRACT = [{"role": "user", "content": "Extract the person: John Smith is 31 years old."}]


def test_the_model_answers_without_template_tokens(instruct_server: LiveServer):
    reply = instruct_server.openai().chat.completions.create(
        model="gpt-4o-mini", temperature=0, max_tokens=40,
        messages=[{"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
    text = reply.choices[0].message.content
    assert "Paris" in text and not any(t in text for t in LEAKS), text
    assert reply.choices[0].finish_reason == "stop" and reply.model == instruct_server.model_id


def test_a_tool_round_trip_in_qwens_own_format(instruct_server: LiveServer):
    client = instruct_server.openai()
    messages = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    first = client.chat.completions.create(model="qwen", temperature=0, max_tokens=80, tools=[WEATHER],
                                           messages=messages)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"
    assert not choice.message.content or not any(t in choice.message.content for t in LEAKS)

    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 17, "sky": "sunny"}'}]
    second = client.chat.completions.create(model="qwen", temperature=0, max_tokens=60, tools=[WEATHER],
                                            messages=messages)
    answer = second.choices[0].message.content
    assert second.choices[0].finish_reason == "stop" and "17" in answer and "sunny" in answer.lower(), answer


def test_a_json_schema_reply_validates(instruct_server: LiveServer):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"},
                                               "population_millions": {"type": "number"}},
              "required": ["city", "country", "population_millions"], "additionalProperties": False}
    reply = instruct_server.openai().chat.completions.create(
        model="qwen", temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Berlin is the capital of Germany and has 3.7 million people. "
                                              "Give this as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    data = json.loads(reply.choices[0].message.content)
    jsonschema.validate(data, schema)
    assert (data["city"], data["country"], data["population_millions"]) == ("Berlin", "Germany", 3.7), data


def test_forced_tool_calls_say_what_auto_says(instruct_server: LiveServer):
    """`required` and a named choice (instructor's TOOLS mode, LangChain's structured output)
    are forced by a grammar in the model's own call syntax, so the model writes the same
    arguments it writes unforced."""
    client = instruct_server.openai()
    found = {}
    for choice in ("auto", "required", {"type": "function", "function": {"name": "Person"}}):
        reply = client.chat.completions.create(model="qwen", temperature=0, max_tokens=60, tools=[PERSON],
                                               tool_choice=choice, messages=EXTRACT)
        (call,) = reply.choices[0].message.tool_calls
        assert call.function.name == "Person" and reply.choices[0].finish_reason == "tool_calls"
        found[json.dumps(choice)] = json.loads(call.function.arguments)
    assert list(found.values()) == [{"name": "John Smith", "age": 31}] * 3, found


def test_a_pdf_sent_as_a_file_part_is_read(instruct_server: LiveServer):
    import base64

    pdf = make_pdf(["Project codename: BLUEHERON.\nStatus: on schedule.", "Budget: 12,000 euros."])
    reply = instruct_server.openai().chat.completions.create(
        model="qwen", temperature=0, max_tokens=30,
        messages=[{"role": "user", "content": [
            {"type": "file", "file": {"filename": "status.pdf",
                                      "file_data": "data:application/pdf;base64," + base64.b64encode(pdf).decode()}},
            {"type": "text", "text": "What is the project codename in the file? Reply with the codename only."}]}])
    assert "BLUEHERON" in reply.choices[0].message.content.upper()
