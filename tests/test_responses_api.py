"""POST /v1/responses (OpenAI's Responses API) on a tiny model whose reply is known: the documented
streaming event sequence, output items, function tools, JSON output, errors that name the field,
and the stateful half: store, previous_response_id, GET/DELETE, a bounded store only this user reads."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterator

import pytest
import requests

from llmpack.runtime.server.responses.store import ResponseStore
from named_events import named_events
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, LiveServer, live_server

REPLY = "".join(SCRIPTED_REPLY)
TEXT_EVENTS = ["response.output_item.added", "response.content_part.added"]
TEXT_DONE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def server(scripted_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("data")
    old = os.environ.get("LLMPACK_DATA_DIR")
    os.environ["LLMPACK_DATA_DIR"] = str(data)
    try:
        with live_server(scripted_model) as srv:
            srv.data_dir = data
            yield srv
    finally:
        os.environ.pop("LLMPACK_DATA_DIR") if old is None else os.environ.__setitem__("LLMPACK_DATA_DIR", old)


def test_the_streamed_events_are_the_documented_sequence(server: LiveServer):
    resp = requests.post(server.url + "/v1/responses", json={"input": "Hi", "stream": True}, stream=True, timeout=60)
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    got = named_events(resp)
    kinds = [k for k, _ in got]
    deltas = [d for k, d in got if k == "response.output_text.delta"]
    assert kinds == ["response.created", "response.in_progress", *TEXT_EVENTS,
                     *["response.output_text.delta"] * len(deltas), *TEXT_DONE, "response.completed"]
    assert [d["sequence_number"] for _, d in got] == list(range(len(got)))
    assert "".join(d["delta"] for d in deltas) == REPLY
    final = got[-1][1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == REPLY
    assert got[0][1]["response"]["status"] == "in_progress" and got[0][1]["response"]["id"] == final["id"]
    item_id = got[2][1]["item"]["id"]
    assert all(d["item_id"] == item_id for d in deltas) and final["output"][0]["id"] == item_id


def test_a_whole_response_and_one_cut_by_max_output_tokens(server: LiveServer):
    body = server.post("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
                                         "instructions": "Be brief."}).json()
    assert body["object"] == "response" and body["status"] == "completed" and body["instructions"] == "Be brief."
    (message,) = body["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == REPLY
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] >= len(SCRIPTED_REPLY)
    cut = server.post("/v1/responses", {"input": "Hi", "max_output_tokens": 2}).json()
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}


def test_previous_response_id_continues_a_stored_conversation(server: LiveServer):
    first = server.post("/v1/responses", {"input": "Hi"}).json()
    second = server.post("/v1/responses", {"input": "Again", "previous_response_id": first["id"]}).json()
    alone = server.post("/v1/responses", {"input": "Again", "store": False}).json()
    assert second["previous_response_id"] == first["id"]
    assert second["usage"]["input_tokens"] > alone["usage"]["input_tokens"] + len(SCRIPTED_REPLY)
    assert requests.get(f"{server.url}/v1/responses/{first['id']}", timeout=10).json() == first
    assert requests.get(f"{server.url}/v1/responses/{alone['id']}", timeout=10).status_code == 404   # store: false
    assert requests.delete(f"{server.url}/v1/responses/{first['id']}", timeout=10).json()["deleted"] is True
    gone = server.post("/v1/responses", {"input": "x", "previous_response_id": first["id"]})
    assert gone.status_code == 404 and gone.json()["error"]["param"] == "previous_response_id"
    db = server.data_dir / "responses.sqlite3"
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


@pytest.mark.parametrize("field, value", [
    ("instructions", "\ud800"), ("input", "a\udfff"), ("metadata", {"k": "\ud800"}), ("user", "\ud800"),
    ("input", [{"role": "user", "content": [{"type": "input_text", "text": "\ud800 hi"}]}]),
])
def test_a_lone_surrogate_is_stored_not_a_500(server: LiveServer, field, value):
    """Found by the protocol fuzz (issue 46): JSON may escape a lone surrogate, which is no UTF-8,
    and SQLite refused the stored response, so the request got a 500."""
    body = {"input": "hi", "max_output_tokens": 2, field: value}
    resp = requests.post(server.url + "/v1/responses", data=json.dumps(body),
                         headers={"Content-Type": "application/json"}, timeout=60)
    assert resp.status_code == 200, resp.text
    again = requests.get(server.url + f"/v1/responses/{resp.json()['id']}", timeout=10)
    assert again.status_code == 200 and again.json()["id"] == resp.json()["id"]


def test_the_store_is_bounded_and_private(tmp_path: Path):
    store = ResponseStore(tmp_path / "store" / "r.sqlite3", limit=3)
    for i in range(5):
        store.put("model", f"resp_{i}", [{"role": "user", "content": str(i)}], {"id": f"resp_{i}"})
    assert [store.get("model", f"resp_{i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert store.get("other-model", "resp_4") is None
    assert stat.S_IMODE((tmp_path / "store" / "r.sqlite3").stat().st_mode) == 0o600


def test_function_tools_and_their_outputs(tool_caller: LiveServer):
    body = tool_caller.post("/v1/responses", {"input": "Weather in Paris?", "tools": [WEATHER]}).json()
    message, call = body["output"]
    assert message["content"][0]["text"] == "Let me check."
    assert call["type"] == "function_call" and call["name"] == "get_weather" and call["status"] == "completed"
    assert json.loads(call["arguments"]) == {"city": "Paris"} and call["call_id"]
    got = named_events(requests.post(tool_caller.url + "/v1/responses", stream=True, timeout=60, json={
        "input": "Weather in Paris?", "tools": [WEATHER], "stream": True}))
    kinds = [k for k, _ in got]
    assert kinds[-5:] == ["response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert got[-1][1]["response"]["output"][1]["name"] == "get_weather"
    follow = tool_caller.post("/v1/responses", {"tools": [WEATHER], "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call["call_id"], "name": "get_weather", "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": '{"sky": "sunny"}'}]})
    assert follow.status_code == 200, follow.json()


def test_json_schema_output(server: LiveServer):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = server.post("/v1/responses", {"input": "A number", "max_output_tokens": 60,
                                         "text": {"format": {"type": "json_schema", "name": "num", "schema": schema}}})
    assert isinstance(json.loads(body.json()["output"][0]["content"][0]["text"])["n"], int)


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x", "temprature": 1}, "temprature"),
    ({"input": 5}, "input"),
    ({"input": [{"type": "web_search_call"}]}, "input[0].type"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
    ({"input": "x", "reasoning": {"effort": "max"}}, "reasoning.effort"),
])
def test_bad_requests_name_the_field(server: LiveServer, body: dict, param: str):
    resp = server.post("/v1/responses", body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.json()
