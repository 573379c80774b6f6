"""What every route module needs from a request before it does its own work: the app's context
(`AppContext`), the model once it is ready (503 while loading, 500 if loading failed), the JSON
body, and the check of the request's model name. Shared by every room that defines routes, so
none of them imports another's helpers."""
from __future__ import annotations

import json
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from flask import current_app, request

from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.http.metrics import Metrics
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.state import ServerState


@dataclass
class AppContext:
    """What create_app() keeps for the routes of one app."""

    state: ServerState
    options: ServerOptions
    metrics: Metrics
    chats: Any                         # the page's saved chats: page/chats.ChatStore (page/ sits above http/)
    responses: Any                     # stored responses: responses/store.ResponseStore (likewise)
    other_names: "_NameLog" = field(default_factory=lambda: _NameLog())


def app_context() -> AppContext:
    return current_app.extensions["llmpack"]


def ready_model(state: ServerState) -> ServedModel:
    model = state.model
    if model is not None:
        return model
    if state.phase == "error":
        raise ApiError(500, f"The model failed to load: {state.message}", code="model_load_failed")
    raise ApiError(503, f"The model is still loading ({state.message}, {state.progress:.0%}); retry shortly.",
                   code="model_loading", headers={"Retry-After": "2"})


def json_body() -> Any:
    if not _declared_json(request.headers):
        raise ApiError(415, "The request body must be JSON, sent with 'Content-Type: application/json'.",
                       code="unsupported_media_type")
    raw = request.get_data(cache=False)   # 413 past MAX_CONTENT_LENGTH
    if too_deep(raw):
        raise bad(None, f"The request body is nested more than {MAX_JSON_DEPTH} levels deep.")
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise bad(None, "The request body is nested too deeply.") from None
    except ValueError as exc:   # includes UnicodeDecodeError
        raise bad(None, f"The request body is not valid JSON: {str(exc)[:200]}") from None


# The deepest JSON a request may be. A tool's JSON schema nests two levels per object level, and
# serde_json's default is 128; what is deeper comes from no real client. Checked before parsing,
# because json's scanner recurses in C down to Python's recursion limit: a body 5,000 brackets
# deep touched some 80 KiB of the stack of whichever of waitress's threads took it, and those pages
# stay resident for the thread's life, so a stream of them grew the server's memory (issue 46).
MAX_JSON_DEPTH = 128
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(rb"[\[\]{}]")


def too_deep(raw: bytes) -> bool:
    """Whether `raw` nests arrays and objects more than MAX_JSON_DEPTH deep (brackets inside
    strings do not count), found without recursing. One count for any real body: only one with
    more brackets than the limit is scanned."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return False
    depth = 0
    for bracket in _BRACKETS.findall(_STRING.sub(b'""', raw)):
        depth += 1 if bracket in b"[{" else -1
        if depth > MAX_JSON_DEPTH:
            return True
    return False


def _declared_json(headers: Any) -> bool:
    """Whether a body is read as JSON: it says so (`application/json`, `*+json`), or it says
    nothing and comes from a tool, not a browser.

    Ollama parses any body as JSON, and clients written for it may send no type: LiteLLM's
    `ollama/` and `ollama_chat/` providers post JSON with no Content-Type header at all. A web
    page can post a typeless body too (a Blob, an ArrayBuffer: no preflight), but a browser marks
    every POST with `Origin` and a modern one with `Sec-Fetch-Site`; a typeless body is read only
    when neither is there. A typed `text/plain` or form body stays refused from anyone: that is
    what a page's no-cors post sends (issue 28), and no JSON client sends it."""
    mimetype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if mimetype == "application/json" or mimetype.endswith("+json"):
        return True
    site = (headers.get("Sec-Fetch-Site") or "none").lower()
    return not mimetype and headers.get("Origin") is None and site == "none"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def check_model_name(body: Any, model: ServedModel) -> None:
    """Any `model` name is served by the one model here, as llama-server and llamafile do: many
    apps hard-code "gpt-4o-mini" or make the user type a name. Responses echo the real id, and
    the first requests under each other name are noted once on the console."""
    if not isinstance(body, dict):
        raise bad(None, "The request body must be a JSON object.")
    name = body.get("model")
    if name is None or name == "":
        return
    if not isinstance(name, str):
        raise bad("model", "'model' must be a string")
    if name.lower() not in model.aliases:
        app_context().other_names.note(name, model.model_id)


class _NameLog:
    """Which other model names were already noted (a few dozen at most, so a client that sends
    a new name each time cannot flood the console or memory)."""

    def __init__(self, limit: int = 32) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._limit = limit

    def note(self, name: str, served: str) -> None:
        with self._lock:
            key = (name[:200], served)
            if key in self._seen or len(self._seen) >= self._limit:
                return
            self._seen.add(key)
        print(f"llmpack: requests name the model {key[0]!r}; this server has one model and answers them with "
              f"{served!r}", file=sys.stderr, flush=True)


def check_model_id(model_id: str, model: ServedModel) -> None:
    """GET /v1/models/ID is a look-up, so an id that is not this model's is a 404 there."""
    if model_id.lower() not in model.aliases:
        raise ApiError(404, f"The model '{model_id[:200]}' does not exist; this server serves '{model.model_id}' "
                            "(and answers requests that name any model with it).", param="model",
                       code="model_not_found")
