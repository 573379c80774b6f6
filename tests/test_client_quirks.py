"""What real clients send that is odd, and the answer each API's own server would give (issue 38).

- No Content-Type: LiteLLM's `ollama/` and `ollama_chat/` providers post JSON with only Host,
  Accept, User-Agent and Content-Length (seen by logging LiteLLM 1.110 against this server).
  Ollama reads any body as JSON; so does llmpack for a body no browser sent: no `Origin`, no
  `Sec-Fetch-Site` other than "none". A typed `text/plain` or form body stays 415, and a
  browser's typeless body stays refused (403 from another site, 415 from the same one).
- Ollama's `keep_alive` (ChatOllama sends "5m"), options that only matter when Ollama loads a
  model (`num_ctx`, `num_gpu`...), options and fields it does not know: Ollama answers, ignoring
  what it cannot use; a value of the wrong type is a 400 naming the field.
- OpenAI and Anthropic refuse a field they do not know, naming it, in their own words."""
from __future__ import annotations

import json

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

MESSAGES = [{"role": "user", "content": "hi"}]
# one request per API room, as its clients shape it
BODIES = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 3},
    "/v1/completions": {"prompt": "hi", "max_tokens": 3},
    "/v1/messages": {"model": "m", "messages": MESSAGES, "max_tokens": 3},
    "/v1/responses": {"input": "hi", "max_output_tokens": 16},
    "/api/chat": {"model": "m", "messages": MESSAGES, "stream": False, "options": {"num_predict": 3}},
    "/api/generate": {"model": "m", "prompt": "hi", "stream": False, "options": {"num_predict": 3}},
}


def send(srv: LiveServer, path: str, body: dict, headers: dict) -> requests.Response:
    """`body` as JSON bytes with exactly `headers` (requests adds no Content-Type to bytes)."""
    return requests.post(srv.url + path, data=json.dumps(body).encode(), headers=headers, timeout=120)


@pytest.mark.parametrize("path", list(BODIES))
def test_json_without_a_content_type_from_a_tool_is_read(chat_server: LiveServer, path: str):
    r = send(chat_server, path, BODIES[path], {"User-Agent": "litellm/1.110.2", "Accept": "*/*"})
    assert r.status_code == 200, r.text
    assert "Content-Type" not in r.request.headers


@pytest.mark.parametrize("headers, status", [
    ({"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, 403),   # another site: the guard
    ({"Origin": "https://evil.example"}, 403),                                  # an older browser: Origin only
    ({"Sec-Fetch-Site": "same-site"}, 403),                                     # another port of this computer
    ("own-origin", 415),                       # the page's own origin: it sends its JSON typed, so this is not it
    ({"Sec-Fetch-Site": "same-origin"}, 415),
    ({"Content-Type": "text/plain"}, 415),                                      # typed, not JSON: from anyone
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
])
def test_a_body_a_browser_could_send_without_a_preflight_is_not_read(chat_server: LiveServer, headers, status):
    if headers == "own-origin":
        headers = {"Origin": chat_server.url}
    before = finished(chat_server)
    r = send(chat_server, "/v1/chat/completions", BODIES["/v1/chat/completions"], headers)
    assert r.status_code == status, r.text
    code = r.json()["error"]["code"]
    assert code == ("cross_site_request" if status == 403 else "unsupported_media_type")
    assert finished(chat_server) == before                      # the model did nothing


def finished(srv: LiveServer) -> float:
    from server_fixtures import finished_metric

    return sum(finished_metric(srv.url, reason) for reason in ("stop", "length"))


@pytest.mark.parametrize("keep_alive", ["5m", 0, -1, "24h", 300])
def test_ollama_keep_alive_is_accepted(chat_server: LiveServer, keep_alive):
    for path in ("/api/chat", "/api/generate"):
        r = chat_server.post(path, {**BODIES[path], "keep_alive": keep_alive})
        assert r.status_code == 200, r.text
    r = chat_server.post("/api/embed", {"model": "m", "input": "hi", "keep_alive": keep_alive})
    assert r.status_code == 200, r.text


def test_ollama_ignores_what_it_cannot_use_and_names_a_wrong_value(chat_server: LiveServer, capfd):
    """Ollama answers a request with load-time options (this one model was loaded at start), an
    option it does not know (a warning in its log) and a field it does not know (Go's JSON skips
    it): the same here, with a note on the console. A value of the wrong type is refused, naming it."""
    for path in ("/api/chat", "/api/generate"):
        body = {**BODIES[path], "options": {"num_predict": 3, "num_ctx": 8192, "num_gpu": 99, "num_thread": 2,
                                             "mirostat": 1, "rope_frequency_base": 10000.0},
                "logprobs": False, "truncate": True}
        r = chat_server.post(path, body)
        assert r.status_code == 200, r.text
        assert r.json()["done"] is True
    err = capfd.readouterr().err
    assert "'rope_frequency_base'" in err and "'truncate'" in err and "ignored" in err, err
    for field, value, name in (("options", {"temperature": "hot"}, "options.temperature"),
                               ("keep_alive", {"minutes": 5}, "keep_alive"), ("stream", "yes", "stream")):
        r = chat_server.post("/api/chat", {**BODIES["/api/chat"], field: value})
        assert r.status_code == 400 and name in r.json()["error"], r.text


def test_openai_and_anthropic_name_a_field_they_do_not_know(chat_server: LiveServer):
    for path in ("/v1/chat/completions", "/v1/responses"):
        r = chat_server.post(path, {**BODIES[path], "keep_alive": "5m"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "keep_alive", r.text
        assert r.json()["error"]["message"] == "Unrecognized request argument supplied: keep_alive"
    r = chat_server.post("/v1/messages", {**BODIES["/v1/messages"], "keep_alive": "5m"})
    assert r.status_code == 400 and r.json()["error"]["message"] == "keep_alive: Extra inputs are not permitted"
