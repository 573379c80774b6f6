"""The schema fuzz of test_grammar_limits.py over HTTP, where a client reaches it: hostile JSON
schemas in `response_format`, in tool parameters with tool_choice "required" and with a named
tool. Every request is answered within the time limit, with a 200 or a 400 that names the
parameter, and the server keeps answering afterwards."""
from __future__ import annotations

import random
import time

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer
from test_grammar_limits import KINDS, _hostile

TIME_LIMIT_S = 60.0      # a whole request on a loaded 2-core machine; a blow-up took minutes or never ended


def ask(srv: LiveServer, body: dict) -> requests.Response:
    start = time.monotonic()
    r = requests.post(srv.url + "/v1/chat/completions", timeout=TIME_LIMIT_S * 2,
                      json={"messages": [{"role": "user", "content": "go"}], "max_tokens": 1, **body})
    assert time.monotonic() - start < TIME_LIMIT_S
    return r


def bodies(schema: dict) -> list[tuple[str, dict]]:
    params = schema if schema.get("type") == "object" else {"type": "object", "properties": {"a": schema},
                                                             "required": ["a"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    return [("response_format", {"response_format": {"type": "json_schema",
                                                     "json_schema": {"name": "x", "schema": schema}}}),
            ("tools", {"tools": [tool], "tool_choice": "required"}),
            ("tools", {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "f"}}})]


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_schemas_over_http_are_answered_quickly(chat_server: LiveServer, kind: str):
    rng = random.Random(f"schema-fuzz-http-{kind}")
    statuses = []
    for _ in range(2):
        for param, body in bodies(_hostile(rng, kind)):
            r = ask(chat_server, body)
            statuses.append(r.status_code)
            assert r.status_code in (200, 400), r.text[:300]
            if r.status_code == 400:
                err = r.json()["error"]
                if err["code"] == "context_length_exceeded":   # a tool's schema is also in the prompt
                    continue
                assert err["param"] == param and err["code"] in ("invalid_schema", "invalid_grammar"), err
                assert "\n" not in err["message"] and len(err["message"]) < 600
    assert requests.get(chat_server.url + "/health", timeout=30).status_code == 200


def test_the_one_line_integer_schema_that_hung_the_server(chat_server: LiveServer):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10 ** 19 - 1}},
              "required": ["n"]}
    for _, body in bodies(schema):
        assert ask(chat_server, body).status_code == 200
