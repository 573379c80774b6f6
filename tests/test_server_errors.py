"""Everything that can go wrong at the HTTP door: status codes and OpenAI error shapes, the
Host-header and API-key guards, CORS, path traversal, disconnects, a full queue and fuzzing. A
model still loading or failed, and the `llmpack run` process lifecycle, are
tests/test_server_lifecycle.py's."""
from __future__ import annotations

import json
import random
import socket
import threading
from pathlib import Path

import openai
import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import (LiveServer, finished_metric, live_server, post_on_socket, sse_events,
                             stream_post, wait_idle, wait_until)

from ggufs import CHATML_TEMPLATE
from helpers.http import error_of, raw
from llmpack.runtime.core.prompt import tokenize_prompt
from llmpack.runtime.server.openai import protocol
from llmpack.runtime.server.http import security

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def long_model(tiny_model_factory) -> Path:
    """The tiny ChatML model with an 8k trained context: an unbounded request runs for seconds."""
    return tiny_model_factory(chat_template=CHATML_TEMPLATE, n_ctx_train=8192)


@pytest.fixture(scope="module")
def srv(long_model: Path):
    with live_server(long_model, "--ctx", "8192") as s:
        yield s


# ---- status codes --------------------------------------------------------------------------------
def test_unknown_route_is_404(srv: LiveServer):
    status, _, data = raw(srv.port, "GET", "/v1/nope")
    assert status == 404 and error_of(data)["code"] == "not_found"


def test_wrong_method_is_405(srv: LiveServer):
    status, headers, data = raw(srv.port, "GET", "/v1/chat/completions")
    assert status == 405 and "POST" in headers["allow"] and error_of(data)["code"] == "method_not_allowed"


def test_body_too_large_is_413(srv: LiveServer):
    from llmpack.runtime.core.attachments import ATTACH_BODY

    body = json.dumps({"prompt": "x" * (9 * 1024 * 1024)}).encode()
    status, _, data = raw(srv.port, "POST", "/v1/completions", body, {"Content-Type": "application/json"})
    assert status == 413 and error_of(data)["code"] == "request_too_large"
    # chat requests may carry files (up to 32 MB, base64): their limit is higher, said in MiB
    body = json.dumps({"messages": [{"role": "user", "content": "x" * (ATTACH_BODY + 2**20)}]}).encode()
    status, _, data = raw(srv.port, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    assert status == 413 and error_of(data)["message"] == f"The request body is larger than {ATTACH_BODY >> 20} MiB."


def test_not_json_is_415(srv: LiveServer):
    status, _, data = raw(srv.port, "POST", "/v1/chat/completions", b'{"messages": []}', {"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in error_of(data)["message"]
    status, _, _ = raw(srv.port, "POST", "/v1/completions", b"prompt=hi",
                       {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415


@pytest.mark.parametrize("body", [b"{", b"not json", b'{"a": NaN}', b"\xff\xfe\x00garbage", b'{"messages": "\xc3\x28"}',
                                  b"[" * 100000 + b"]" * 100000, b"[1, 2]", b'"text"', b"42", b"null", b""])
def test_bad_bodies_are_400(srv: LiveServer, body: bytes):
    for path in ("/v1/chat/completions", "/v1/completions"):
        status, _, data = raw(srv.port, "POST", path, body, {"Content-Type": "application/json"})
        assert status == 400, (body[:20], data)
        error_of(data)


def test_prompt_too_long_is_400_with_numbers(srv: LiveServer):
    n_ctx = srv.state.model.n_ctx
    with pytest.raises(openai.BadRequestError) as info:
        srv.openai().chat.completions.create(model=srv.model_id,
                                             messages=[{"role": "user", "content": "hello " * (n_ctx + 100)}])
    err = info.value.body
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    n_tokens = len(tokenize_prompt(srv.state.model, srv.state.model.chat.render(
        [{"role": "user", "content": "hello " * (n_ctx + 100)}])))
    assert str(n_tokens) in err["message"] and str(srv.engine.max_model_len) in err["message"]
    with pytest.raises(openai.BadRequestError):
        srv.openai().completions.create(model=srv.model_id, prompt="hello " * (n_ctx + 100))


def test_internal_error_is_500_without_details(srv: LiveServer, monkeypatch):
    def broken(kind: str) -> str:
        raise RuntimeError("secret-internal-detail")

    monkeypatch.setattr(protocol, "new_id", broken)
    status, _, data = raw(srv.port, "POST", "/v1/chat/completions", json.dumps({"messages": HELLO}).encode(),
                          {"Content-Type": "application/json"})
    assert status == 500 and error_of(data)["type"] == "server_error"
    assert b"secret" not in data and b"Traceback" not in data
    monkeypatch.undo()
    assert srv.openai().chat.completions.create(model=srv.model_id, messages=HELLO, max_tokens=2).choices


@pytest.mark.parametrize("key", ["temperature", "top_p", "top_k", "min_p", "seed", "n", "max_tokens", "stop",
                                 "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs",
                                 "top_logprobs", "stream", "model", "user", "stream_options"])
def test_extreme_values_are_400_not_500(srv: LiveServer, key: str):
    for value in ("10" * 200, "1e308", "-1e308", str(2**64), "-9223372036854775809", '"1"', "[]", "{}",
                  "[[[[[[[[1]]]]]]]]", '{"a": {"b": []}}', "true", "-0.0"):
        body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "%s": %s}' % (
            key.encode(), value.encode())
        status, _, data = raw(srv.port, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        assert status in (200, 400, 404), (key, value, status, data[:200])
        if status != 200:
            error_of(data)


def test_lone_surrogates_are_harmless(srv: LiveServer):
    body = b'{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2, "stop": ["\\udfff"]}'
    status, _, data = raw(srv.port, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    assert status == 200, data


# ---- Host header (DNS rebinding) ------------------------------------------------------------------
@pytest.mark.parametrize("host, ok", [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("[::1]:{port}", True), ("LOCALHOST:{port}", True),
    ("localhost", True), ("app.localhost:{port}", True),
    ("evil.example:{port}", False), ("evil.example", False), ("localhost.evil.example:{port}", False),
    ("127.0.0.1:1", False), ("localhost:{port}0", False), ("127.0.0.1.nip.io:{port}", False),
    ("192.168.1.20:{port}", False),
])
def test_host_header_check(srv: LiveServer, host: str, ok: bool):
    status, _, data = raw(srv.port, "GET", "/v1/models", host=host.format(port=srv.port))
    if ok:
        assert status == 200
    else:
        assert status == 403 and error_of(data)["code"] == "host_not_allowed"
    status, _, _ = raw(srv.port, "GET", "/", host=host.format(port=srv.port))
    assert (status == 200) == ok


def test_host_check_on_all_interfaces():
    from types import SimpleNamespace

    opts = SimpleNamespace(host="0.0.0.0", port=8080, extra_hosts=())
    names = security.allowed_names(opts)
    assert security.host_ok("192.168.1.20:8080", opts, names)       # LAN clients by IP
    assert security.host_ok(f"{socket.gethostname()}:8080", opts, names)
    assert not security.host_ok("evil.example:8080", opts, names)
    assert not security.host_ok("192.168.1.20:9999", opts, names)


# ---- API key, CORS --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keyed(tiny_chat_model: Path):
    with live_server(tiny_chat_model, "--api-key", "s3cret-key", "--cors") as s:
        yield s


def test_api_key(keyed: LiveServer, monkeypatch):
    calls = []
    real = security.hmac.compare_digest
    monkeypatch.setattr(security.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    url = keyed.url
    for path in ("/v1/models", "/metrics"):
        assert requests.get(url + path).status_code == 401
        r = requests.get(url + path, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert requests.get(url + path, headers={"Authorization": "s3cret-key"}).status_code == 401
        assert requests.get(url + path, headers={"Authorization": "Bearer s3cret-key"}).status_code == 200
    assert calls and all(b == b"s3cret-key" for _, b in calls)            # compared in constant time
    assert requests.get(url + "/health").status_code == 200 and requests.get(url + "/").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        keyed.openai(api_key="wrong").chat.completions.create(model=keyed.model_id, messages=HELLO)
    ok = keyed.openai(api_key="s3cret-key").chat.completions.create(model=keyed.model_id, messages=HELLO, max_tokens=2)
    assert ok.choices


def test_cors(keyed: LiveServer, srv: LiveServer):
    assert "access-control-allow-origin" not in {k.lower() for k in requests.get(srv.url + "/v1/models").headers}
    pre = requests.options(keyed.url + "/v1/chat/completions", headers={
        "Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 204 and pre.headers["Access-Control-Allow-Origin"] == "*"
    assert "Authorization" in pre.headers["Access-Control-Allow-Headers"]
    r = requests.get(keyed.url + "/health", headers={"Origin": "http://elsewhere.example"})
    assert r.headers["Access-Control-Allow-Origin"] == "*"


# ---- static files ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [
    "/static/../pyproject.toml", "/static/%2e%2e/pyproject.toml", "/static/..%2fpyproject.toml",
    "/static/%2e%2e%2f%2e%2e%2fpyproject.toml", "/static/..%5c..%5cpyproject.toml", "/static/....//pyproject.toml",
    "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/static/__init__.py", "/static/.hidden.js",
    "/static/../../../../etc/passwd", "/static/%252e%252e/pyproject.toml", "/../pyproject.toml",
])
def test_path_traversal_is_404(srv: LiveServer, path: str):
    status, _, data = raw(srv.port, "GET", path)
    assert status == 404, (path, data[:200])
    assert b"[build-system]" not in data and b"root:" not in data


def test_page_and_static_files(srv: LiveServer):
    page = requests.get(srv.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    js = requests.get(srv.url + "/static/app.js")
    assert js.status_code == 200 and "javascript" in js.headers["Content-Type"]
    assert js.headers["X-Content-Type-Options"] == "nosniff"


# ---- disconnects free the KV cache ----------------------------------------------------------------
def test_stream_disconnect_aborts_and_frees_kv(srv: LiveServer):
    engine = srv.engine
    base = wait_idle(engine)
    aborted = finished_metric(srv.url, "abort")
    body = {"model": srv.model_id, "prompt": "the world of water " * 20, "stream": True, "ignore_eos": True,
            "max_tokens": 100000, "temperature": 0}
    sock = post_on_socket(srv.port, "/v1/completions", body)
    received = b""
    while received.count(b"\ndata: ") < 5:        # a few streamed events: it is generating
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the stream: {received!r}"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200 ") and b"text/event-stream" in received
    assert engine.stats().num_running == 1 and engine.stats().kv_blocks_used > base.kv_blocks_used
    sock.shutdown(socket.SHUT_RDWR)   # the client goes away mid-stream
    sock.close()
    after = wait_idle(engine, kv_baseline=base.kv_blocks_used, timeout=30)
    generated = after.generation_tokens_total - base.generation_tokens_total
    assert generated < engine.max_model_len - 200, "the request ran to the end instead of being aborted"
    assert wait_until(lambda: finished_metric(srv.url, "abort") == aborted + 1)


def test_non_streaming_disconnect_aborts(srv: LiveServer):
    """The client hangs up while a non-streaming request generates: nothing is written until the
    end, so only waitress's client_disconnected check can notice."""
    engine = srv.engine
    base = wait_idle(engine)
    sock = post_on_socket(srv.port, "/v1/completions", {"model": srv.model_id, "prompt": "hello", "ignore_eos": True,
                                                        "max_tokens": 100000, "temperature": 0})
    wait_until(lambda: engine.stats().num_running == 1)
    sock.close()
    after = wait_idle(engine, kv_baseline=base.kv_blocks_used, timeout=30)
    assert after.generation_tokens_total - base.generation_tokens_total < engine.max_model_len - 200


# ---- a full queue ---------------------------------------------------------------------------------
def test_queue_full_is_503(long_model: Path):
    with live_server(long_model, "--ctx", "8192", "--parallel", "1", "--max-waiting", "1") as s:
        engine = s.engine
        body = {"model": s.model_id, "prompt": "hello", "stream": True, "ignore_eos": True, "max_tokens": 100000}
        a = stream_post(s.url + "/v1/completions", body)
        a_events = sse_events(a)      # keep it: dropping the iterator closes the connection
        next(a_events)
        held = []    # a waiting completions stream sends nothing (not even headers) until it runs
        t = threading.Thread(target=lambda: held.append(stream_post(s.url + "/v1/completions", body)), daemon=True)
        t.start()
        wait_until(lambda: engine.stats().num_waiting == 1)
        assert engine.stats().num_running == 1
        with pytest.raises(openai.APIStatusError) as info:
            s.openai().completions.create(model=s.model_id, prompt="hello", max_tokens=2)
        assert info.value.status_code == 503 and info.value.body["code"] == "queue_full"
        assert info.value.response.headers["Retry-After"]
        a.close()
        t.join(30)
        held[0].close()
        wait_idle(engine, timeout=10)
        assert s.openai().completions.create(model=s.model_id, prompt="hello", max_tokens=2).choices


# ---- fuzzing --------------------------------------------------------------------------------------
def _junk(rng: random.Random, depth: int = 0):
    kinds = ["none", "bool", "int", "huge", "float", "str", "list", "dict"]
    kind = rng.choice(kinds if depth < 4 else kinds[:6])
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([-1, 0, 1, 2, 3, -(2**31), 2**31])
    if kind == "huge":
        return rng.choice([10**30, -(10**30), 2**63, 2**64 + 1, 1e308, -1e308, 10**400])
    if kind == "float":
        return rng.choice([0.5, -0.5, 1e-300, 3.7, 1.0])
    if kind == "str":
        return rng.choice(["", "x", "\u0000", "\ud800", "é" * 50, "<|im_start|>", "a" * 5000, "{{ 7*7 }}"])
    if kind == "list":
        return [_junk(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["role", "content", "type", "text", "x"]): _junk(rng, depth + 1) for _ in range(rng.randint(0, 3))}


KEYS = ["model", "messages", "prompt", "stream", "n", "stop", "max_tokens", "temperature", "top_p", "top_k",
        "seed", "logprobs", "top_logprobs", "stream_options", "tools", "response_format", "presence_penalty",
        "min_p", "echo", "best_of", "user", "unknown_thing", "logit_bias", "max_completion_tokens"]


def test_fuzz_never_breaks_the_server(srv: LiveServer):
    rng = random.Random(1234)
    seen: dict[int, int] = {}
    for i in range(400):
        path = rng.choice(["/v1/chat/completions", "/v1/completions"])
        body = {"messages": HELLO} if "chat" in path else {"prompt": "hello"}
        body["max_tokens"] = 3
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(KEYS)
            if rng.random() < 0.15:
                body.pop(key, None)
            else:
                value = _junk(rng)
                if key in ("max_tokens", "max_completion_tokens") and isinstance(value, int) and value > 3:
                    value = -value
                body[key] = value
        if i % 10 == 0:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
        else:
            data = json.dumps(body).encode()
            if i % 7 == 0:
                data = data[: rng.randint(0, len(data))]
        status, headers, out = raw(srv.port, "POST", path, data, {"Content-Type": "application/json"})
        seen[status] = seen.get(status, 0) + 1
        assert status in (200, 400, 404), (status, data[:300], out[:300])
        if status != 200:
            error_of(out)
        elif body.get("stream") is True:
            assert out.rstrip().endswith(b"data: [DONE]")
    print(f"\nfuzz statuses: {seen}")
    assert seen.get(400, 0) > 100 and seen.get(200, 0) > 10
    wait_idle(srv.engine)
    assert requests.get(srv.url + "/health").json()["status"] == "ok"
    assert srv.openai().chat.completions.create(model=srv.model_id, messages=HELLO, max_tokens=2).choices
