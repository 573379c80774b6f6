"""POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API) on a tiny model whose
reply is known: the documented event sequence, stop reasons, tool_use blocks, the x-api-key header
Anthropic clients send, and errors in Anthropic's own shape."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
import requests

from named_events import named_events
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, LiveServer, live_server

REPLY = "".join(SCRIPTED_REPLY)
HI = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def server(scripted_model: Path) -> Iterator[LiveServer]:
    with live_server(scripted_model) as srv:
        yield srv


def test_a_whole_message(server: LiveServer):
    msg = server.post("/v1/messages", HI).json()
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["id"].startswith("msg_")
    assert msg["content"] == [{"type": "text", "text": REPLY}]
    assert msg["stop_reason"] == "end_turn" and msg["stop_sequence"] is None
    assert msg["usage"]["output_tokens"] >= len(SCRIPTED_REPLY)
    count = server.post("/v1/messages/count_tokens", {k: v for k, v in HI.items() if k != "max_tokens"}).json()
    assert count["input_tokens"] == msg["usage"]["input_tokens"] + msg["usage"]["cache_read_input_tokens"]


def test_the_streamed_events_are_the_documented_sequence(server: LiveServer):
    resp = requests.post(server.url + "/v1/messages", json={**HI, "stream": True}, stream=True, timeout=60)
    got = named_events(resp)
    kinds = [k for k, _ in got]
    n = kinds.count("content_block_delta")
    assert kinds == ["message_start", "content_block_start", *["content_block_delta"] * n, "content_block_stop",
                     "message_delta", "message_stop"]
    assert got[0][1]["message"]["content"] == [] and got[1][1]["content_block"] == {"type": "text", "text": ""}
    assert "".join(d["delta"]["text"] for k, d in got if k == "content_block_delta") == REPLY
    assert got[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert got[-2][1]["usage"]["output_tokens"] >= len(SCRIPTED_REPLY)


def test_stop_reasons(server: LiveServer):
    stopped = server.post("/v1/messages", {**HI, "stop_sequences": ["bold"]}).json()
    assert stopped["stop_reason"] == "stop_sequence" and stopped["stop_sequence"] == "bold"
    assert "bold" not in stopped["content"][0]["text"]
    cut = server.post("/v1/messages", {**HI, "max_tokens": 2}).json()
    assert cut["stop_reason"] == "max_tokens"


def test_a_tool_call_is_a_tool_use_block_and_takes_its_result(tool_caller: LiveServer):
    server = tool_caller
    msg = server.post("/v1/messages", {**HI, "tools": [WEATHER],
                                       "tool_choice": {"type": "tool", "name": "get_weather"}}).json()
    assert msg["stop_reason"] == "tool_use"
    (use,) = [b for b in msg["content"] if b["type"] == "tool_use"]
    assert use["name"] == "get_weather" and isinstance(use["input"]["city"], str) and use["id"]
    auto = server.post("/v1/messages", {**HI, "tools": [WEATHER]}).json()
    assert auto["content"][0] == {"type": "text", "text": "Let me check."} and auto["content"][1]["type"] == "tool_use"
    follow = server.post("/v1/messages", {**HI, "tools": [WEATHER], "messages": [
        HI["messages"][0], {"role": "assistant", "content": msg["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "sunny"}]}]})
    assert follow.status_code == 200 and follow.json()["type"] == "message"   # (this model always calls)
    streamed = named_events(requests.post(server.url + "/v1/messages", stream=True, timeout=60, json={
        **HI, "stream": True, "tools": [WEATHER], "tool_choice": {"type": "any"}}))
    starts = [d["content_block"] for k, d in streamed if k == "content_block_start"]
    assert starts[-1]["type"] == "tool_use" and starts[-1]["name"] == "get_weather"
    assert streamed[-2][1]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize(("body", "words"), [
    ({k: v for k, v in HI.items() if k != "max_tokens"}, "max_tokens"),
    ({**HI, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({**HI, "temperature": 1.5}, "temperature"),
    ({**HI, "tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]}, "tool_choice.name"),
    ({**HI, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, "messages.0.content.0.source"),
    ({**HI, "top_q": 1}, "top_q"),
])
def test_errors_in_anthropics_shape(server: LiveServer, body: dict, words: str):
    resp = server.post("/v1/messages", body)
    assert resp.status_code == 400
    err = resp.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error" and words in err["error"]["message"]


def test_x_api_key_is_the_key_and_a_401_is_anthropic_shaped(scripted_model: Path):
    with live_server(scripted_model, "--api-key", "k3y") as srv:
        missing = srv.post("/v1/messages", HI)
        assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
        assert srv.post("/v1/messages", HI, headers={"x-api-key": "wrong"}).status_code == 401
        assert srv.post("/v1/messages", HI, headers={"x-api-key": "k3y"}).status_code == 200
        assert srv.post("/v1/messages", HI, headers={"Authorization": "Bearer k3y"}).status_code == 200


def test_structured_output_and_the_fields_newer_clients_send(server: LiveServer):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    msg = server.post("/v1/messages", {**HI, "max_tokens": 60, "cache_control": {"type": "ephemeral"},
                                       "thinking": {"type": "adaptive"}, "speed": "standard",
                                       "output_config": {"format": {"type": "json_schema", "schema": schema}}}).json()
    assert isinstance(json.loads(msg["content"][0]["text"])["n"], int)
    refused = server.post("/v1/messages", {**HI, "mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]})
    assert refused.status_code == 400 and "mcp_servers" in refused.json()["error"]["message"]
