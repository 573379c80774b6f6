"""The official clients against the instruct demo model (Qwen2.5-Coder 0.5B Instruct), as an app
would use them: OpenAI's `responses.create`, Anthropic's `messages.create` / `messages.stream` /
`count_tokens`, the `ollama` client's list, chat, generate and embed, and Simon Willison's `llm`
(its command line and its Python API) pointed at the server as an OpenAI-compatible model.

Stored responses go to a temporary data folder (`chat_data`), never the user's. Greedy decoding keeps answers stable; each assertion checks what even a 0.5B model gets right
(a capital, a tool's argument), never its wording."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anthropic
import jsonschema
import ollama
import pytest

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

pytestmark = pytest.mark.instruct

CAPITAL = "What is the capital of France? Answer in one sentence."
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                          "required": ["city"]}}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


# Anthropic's SDK no longer types the sampling fields (temperature, top_p, top_k); the API still takes them.
GREEDY = {"temperature": 0}


def _anthropic(srv: LiveServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key="not-needed", max_retries=0, timeout=120)


def _ollama(srv: LiveServer) -> ollama.Client:
    return ollama.Client(host=srv.url, timeout=120)


def test_openai_responses_plain_and_streamed(instruct_server: LiveServer, chat_data):
    client = instruct_server.openai()
    reply = client.responses.create(model="gpt-4.1-mini", input=CAPITAL, temperature=0, max_output_tokens=40)
    assert "Paris" in reply.output_text and reply.status == "completed"
    with client.responses.stream(model="gpt-4.1-mini", input=CAPITAL, temperature=0, max_output_tokens=40) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text and "Paris" in final.output_text


def test_openai_responses_function_tools_round_trip(instruct_server: LiveServer, chat_data):
    client = instruct_server.openai()
    tool = {"type": "function", **WEATHER}
    first = client.responses.create(model="m", input="What is the weather like in Paris right now?", tools=[tool],
                                    temperature=0, max_output_tokens=80)
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] == "Paris"
    second = client.responses.create(model="m", previous_response_id=first.id, tools=[tool], temperature=0,
                                     max_output_tokens=60, input=[{"type": "function_call_output", "call_id": call.call_id,
                                                                   "output": '{"temperature_c": 17, "sky": "sunny"}'}])
    assert "17" in second.output_text or "sunny" in second.output_text.lower(), second.output_text


def test_openai_responses_json_schema_and_previous_response_id(instruct_server: LiveServer, chat_data):
    client = instruct_server.openai()
    out = client.responses.create(model="m", input="Extract the person: John Smith is 31 years old.", temperature=0,
                                  max_output_tokens=60,
                                  text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}})
    person = json.loads(out.output_text)
    jsonschema.validate(person, PERSON)
    assert person["age"] == 31
    first = client.responses.create(model="m", input="My name is Ada. Say hello.", temperature=0, max_output_tokens=30)
    second = client.responses.create(model="m", input="What is my name? One word.", previous_response_id=first.id,
                                     temperature=0, max_output_tokens=10)
    assert "Ada" in second.output_text, second.output_text


def test_anthropic_messages_create_and_stream(instruct_server: LiveServer):
    client = _anthropic(instruct_server)
    msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=40, extra_body=GREEDY, system="Be brief.",
                                 messages=[{"role": "user", "content": CAPITAL}])
    assert msg.stop_reason == "end_turn" and "Paris" in msg.content[0].text
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=40, extra_body=GREEDY,
                                messages=[{"role": "user", "content": CAPITAL}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "Paris" in text and final.content[0].text == text and final.usage.output_tokens > 0


def test_anthropic_tools_and_count_tokens(instruct_server: LiveServer):
    client = _anthropic(instruct_server)
    tool = {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}
    question = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    msg = client.messages.create(model="m", max_tokens=80, extra_body=GREEDY, tools=[tool], messages=question)
    assert msg.stop_reason == "tool_use"
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input["city"] == "Paris"
    answer = client.messages.create(model="m", max_tokens=60, extra_body=GREEDY, tools=[tool], messages=[
        *question, {"role": "assistant", "content": msg.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                       "content": '{"temperature_c": 17, "sky": "sunny"}'}]}])
    assert answer.stop_reason == "end_turn" and ("17" in answer.content[0].text or "sunny" in answer.content[0].text)
    count = client.messages.count_tokens(model="m", messages=question, tools=[tool])
    assert count.input_tokens == msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)


def test_ollama_client_list_chat_generate_embed(instruct_server: LiveServer):
    client = _ollama(instruct_server)
    (listed,) = client.list().models
    assert listed.model == instruct_server.model_id and listed.details.format == "gguf"
    options = {"temperature": 0, "num_predict": 40}
    reply = client.chat(model=listed.model, messages=[{"role": "user", "content": CAPITAL}], options=options)
    assert "Paris" in reply.message.content and reply.done
    parts = list(client.chat(model=listed.model, messages=[{"role": "user", "content": CAPITAL}], options=options,
                             stream=True))
    assert "".join(p.message.content for p in parts) == reply.message.content and parts[-1].done
    gen = client.generate(model=listed.model, prompt=CAPITAL, options=options)
    assert "Paris" in gen.response
    vectors = client.embed(model=listed.model, input=["Paris is in France.", "Bananas are yellow."]).embeddings
    assert len(vectors) == 2 and len(vectors[0]) > 100


def _llm_model(srv: LiveServer, folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """`llm`'s documented way to use an OpenAI-compatible server: extra-openai-models.yaml in its
    user folder (LLM_USER_PATH), naming the server's /v1."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "extra-openai-models.yaml").write_text(
        f"- model_id: llmpack\n  model_name: qwen\n  api_base: {srv.url}/v1\n  supports_tools: true\n")
    monkeypatch.setenv("LLM_USER_PATH", str(folder))
    return "llmpack"


def test_llm_command_line_and_python_api(instruct_server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import llm

    name = _llm_model(instruct_server, tmp_path / "llm", monkeypatch)
    cli = Path(sys.executable).with_name("llm")
    out = subprocess.run([str(cli), "-m", name, "--key", "not-needed", "-o", "temperature", "0", "-o", "max_tokens",
                          "40", "--no-log", CAPITAL], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "Paris" in out.stdout, out.stderr
    model = llm.get_model(name)
    reply = model.prompt(CAPITAL, key="not-needed", temperature=0, max_tokens=40)
    pieces = list(reply)                                  # streamed
    assert len(pieces) > 1 and "Paris" in "".join(pieces) and reply.text() == "".join(pieces)

    def get_weather(city: str) -> str:
        """Get the current weather in a city"""
        return "sunny, 17 C"

    asked = model.prompt("What is the weather like in Paris right now?", key="not-needed", tools=[get_weather],
                         temperature=0, max_tokens=80)
    (call,) = asked.tool_calls()
    assert call.name == "get_weather" and call.arguments["city"] == "Paris"
