"""One HTTP request carried from Ray Serve's ingress to a replica, and run there through llmpack's
own WSGI app: the single-machine server's routes answer it, byte for byte.

Ray's HTTP proxy hands a replica a streaming ASGI request whose body is not readable while the
request is routed, and prefix-cache affinity must see the prompt to choose a replica. So the
ingress reads the request once into an `HttpCall` (method, path, headers, body, and the prompt's
`prefix_keys`) and passes it through a DeploymentHandle, where the request router sees it; the
replica replays it into the Flask app with `run_wsgi` and streams back what the app writes.
Nothing here knows a route: no second implementation of the API exists.
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

APP_NAME = "llmpack"       # the Serve application's name: its replicas' actors are SERVE_REPLICA::llmpack#replica#ID
PREFIX_CHUNK = 256         # characters per prefix key: about 64 tokens, a few KV blocks
PREFIX_MAX_KEYS = 64       # keys per request (the first 16 k characters decide the route)


@dataclass(slots=True)
class HttpCall:
    """An HTTP request as the ingress received it, picklable."""
    method: str
    path: str
    query: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    client: str = "127.0.0.1"
    server: tuple[str, int] = ("127.0.0.1", 8000)
    prefix_keys: list[str] = field(default_factory=list)   # for the request router (router.py)
    replica: str = ""      # a replica's id: the router sends the call there only (aggregate.py's fan-out)


@dataclass(slots=True)
class HttpHead:
    """The first item a replica streams back: the status and headers the app chose."""
    status: int
    headers: list[tuple[str, str]]


def prompt_text(path: str, body: bytes) -> str:
    """The text whose prefix decides where a request runs: a chat's messages in order (role and
    content), a completion's prompt; "" for anything else. Only a routing hint: never parsed
    strictly (the app itself validates the request and answers 400)."""
    if not path.startswith("/v1/") or not body:
        return ""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):   # 5,000 nested lists: the app answers 400
        return ""
    if not isinstance(data, dict):
        return ""
    if isinstance(data.get("messages"), list):
        parts = []
        for m in data["messages"]:
            if isinstance(m, dict):
                content = m.get("content")
                if isinstance(content, list):   # content parts: their text (a part's "text" may be anything)
                    content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
                parts.append(f"<{m.get('role')}>{content if isinstance(content, str) else ''}")
        return "\n".join(parts)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]   # a batch: the first prompt's prefix
    if isinstance(prompt, list):   # token ids
        return " ".join(str(t) for t in prompt[:PREFIX_CHUNK * PREFIX_MAX_KEYS // 6])
    return prompt if isinstance(prompt, str) else ""


def prefix_keys(text: str) -> list[str]:
    """Chained hashes of the text's whole PREFIX_CHUNK-character chunks: two prompts share the first
    k keys exactly when they share their first k chunks, as a replica's prefix cache would."""
    keys, h = [], hashlib.blake2b(digest_size=8)
    for i in range(min(len(text) // PREFIX_CHUNK, PREFIX_MAX_KEYS)):
        h.update(text[i * PREFIX_CHUNK:(i + 1) * PREFIX_CHUNK].encode("utf-8", "surrogatepass"))
        keys.append(h.copy().hexdigest())
    return keys


def environ_for(call: HttpCall, disconnected: Callable[[], bool]) -> dict[str, Any]:
    """The WSGI environ waitress would build for this request. `disconnected` plays the part of
    waitress.client_disconnected: the server's watcher aborts a request whose client has gone."""
    env: dict[str, Any] = {
        # WSGI strings are bytes as Latin-1 (PEP 3333), as waitress gives them: the decoded path of
        # "/api/chats/%F0%9F%8E%89" in Werkzeug's hands was an UnicodeEncodeError, a 503 (issue 46)
        "REQUEST_METHOD": call.method.upper(), "SCRIPT_NAME": "", "PATH_INFO": _wsgi_string(call.path),
        "QUERY_STRING": _wsgi_string(call.query), "SERVER_NAME": call.server[0], "SERVER_PORT": str(call.server[1]),
        "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": call.client, "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(call.body), "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(call.body)), "waitress.client_disconnected": disconnected}
    for name, value in call.headers:
        key = name.upper().replace("-", "_")
        if key == "CONTENT_TYPE":
            env["CONTENT_TYPE"] = value
        elif key != "CONTENT_LENGTH":
            env[f"HTTP_{key}"] = f"{env[f'HTTP_{key}']},{value}" if f"HTTP_{key}" in env else value
    return env


def _wsgi_string(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("latin-1")


def run_wsgi(app: Callable, call: HttpCall, cancelled: threading.Event) -> Iterator[HttpHead | bytes]:
    """Run the WSGI app on `call`: first an HttpHead, then each chunk of the body as the app writes
    it. `cancelled` (the client hung up) closes the app's iterator at the next chunk, and the app's
    disconnect watcher sees it even while no chunk comes."""
    head: list[HttpHead] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info=None):
        head[:] = [HttpHead(int(status.split(" ", 1)[0]), list(headers))]
        return lambda data: None   # the legacy write(): llmpack's app never uses it

    result = app(environ_for(call, cancelled.is_set), start_response)
    try:
        sent = False
        for chunk in result:
            if not sent:
                yield head[0]
                sent = True
            if chunk:
                yield bytes(chunk)
            if cancelled.is_set():
                return
        if not sent:
            yield head[0]
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
