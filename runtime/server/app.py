"""Flask application factory: the chat page, /health, /metrics and the OpenAI routes.

Every error (ours, Flask's 404/405/413, an unexpected exception) is answered in OpenAI's shape
`{"error": {"message", "type", "param", "code"}}`; tracebacks go to stderr, never to clients.
"""
from __future__ import annotations

import importlib.resources
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from flask import Flask, Response, abort, jsonify, request, send_from_directory
from werkzeug.exceptions import HTTPException

from llmpack.runtime.server import attachments, chat_routes, embeddings_routes, openai_routes, security
from llmpack.runtime.server.api_error import ApiError
from llmpack.runtime.server.chats import ChatStore
from llmpack.runtime.server.metrics import Metrics
from llmpack.runtime.server.state import ServerState

MAX_BODY = 8 * 1024 * 1024
STATIC_TYPES = {".html", ".css", ".js", ".svg", ".png", ".ico", ".webp", ".woff", ".woff2", ".json", ".map", ".txt"}
_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large", 415: "unsupported_media_type"}


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0                      # the bound port (set by launch once it is known)
    api_key: str | None = None
    cors: bool = False
    max_body: int = MAX_BODY
    webui_dir: Path | None = None      # default: the installed llmpack.webui package
    extra_hosts: tuple[str, ...] = ()  # more Host names to accept
    chat_token: str | None = None      # this launch's secret for saved chats (chat_routes); None: off


def webui_dir() -> Path:
    """The chat page's files; a real folder both installed and inside a PyInstaller bundle."""
    return Path(str(importlib.resources.files("llmpack.webui")))


def error_response(status: int, message: str, type: str | None = None, code: str | None = None,
                   param: str | None = None, headers: dict | None = None) -> Response:
    err = ApiError(status, message, param=param, code=code, type=type, headers=headers)
    resp = jsonify(err.body())
    resp.status_code = status
    resp.headers.update(err.headers)
    return resp


def _body_limit(options: ServerOptions) -> int:
    """The limit of this request (routes that carry files raise it), else the app's."""
    try:
        return request.max_content_length or options.max_body
    except RuntimeError:   # outside a request
        return options.max_body


def create_app(state: ServerState, options: ServerOptions | None = None) -> Flask:
    options = options or ServerOptions()
    web = options.webui_dir or webui_dir()
    app = Flask(__name__, static_folder=None, root_path=str(web))
    app.config["MAX_CONTENT_LENGTH"] = options.max_body
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.merge_slashes = False   # "//x" is a 404, not a redirect
    metrics = Metrics(state)
    app.extensions["llmpack"] = SimpleNamespace(state=state, metrics=metrics, options=options,
                                                chats=ChatStore())   # opens its file on first use
    security.install(app, options, error_response)
    app.register_blueprint(openai_routes.bp)
    app.register_blueprint(embeddings_routes.bp)
    app.register_blueprint(chat_routes.bp)
    app.register_blueprint(attachments.bp)

    @app.get("/")
    @security.public("the chat page: it holds no data; what it shows comes from guarded routes")
    def index():
        resp = send_from_directory(web, "index.html", max_age=0)
        resp.headers["Cache-Control"] = "no-store"   # the launch link carries ?token=: keep no copy
        return resp

    @app.get("/static/<path:filename>")
    @security.public("the page's own scripts and styles, the same for every user")
    def static_file(filename: str):
        if Path(filename).suffix.lower() not in STATIC_TYPES or any(p.startswith(".") for p in filename.split("/")):
            abort(404)
        resp = send_from_directory(web, filename, max_age=0)   # safe_join: no traversal
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    @app.get("/favicon.ico")
    @security.public("the page's icon")
    def favicon():
        return static_file("favicon.svg") if (web / "favicon.svg").is_file() else Response(status=204)

    @app.get("/health")
    @security.public("readiness for scripts and the page; without the key it leaves out the system prompt")
    def health():
        body, status = state.health(authorized=not options.api_key or
                                    security.key_ok(request.headers.get("Authorization"), options.api_key))
        resp = jsonify(body)
        resp.status_code = status
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.get("/metrics")
    def metrics_route():
        data, content_type = metrics.render()
        return Response(data, content_type=content_type)

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.message, exc.type, exc.code, exc.param, exc.headers)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        status = exc.code or 500
        message = {404: "Not found.", 405: "Method not allowed for this route.",
                   413: f"The request body is larger than {_body_limit(options) // (1024 * 1024)} MiB."}.get(
            status, exc.description or exc.name)
        resp = error_response(status, message, code=_CODES.get(status))
        if status == 405:
            for key, value in exc.get_headers():
                if key.lower() == "allow":
                    resp.headers["Allow"] = value
        return resp

    @app.errorhandler(Exception)
    def _internal(exc: Exception):
        traceback.print_exc(file=sys.stderr)
        return error_response(500, "Internal server error.", code="internal_error")

    return app
