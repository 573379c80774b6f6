"""The one route table: `create_app` wires every room's routes into one Flask app.

    /                     the chat page (public) and /static/* (public)      here
    /health, /metrics     readiness (public) and Prometheus                  here
    /v1/models, /v1/chat/completions, /v1/completions,
    /v1/embeddings, /tokenize, /detokenize                                    openai/
    /v1/responses, /v1/responses/ID                                          responses/
    /v1/messages, /v1/messages/count_tokens                                  anthropic/
    /api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/embed...   ollama/
    /v1/extract, /api/chats*, /api/settings                                  page/

Guards (http/security.py) run before every route; errors (http/errors.py) are answered in one shape.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

from flask import Flask, Response, abort, jsonify, request, send_from_directory

from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.context import AppContext
from llmpack.runtime.server.http.errors import install_error_handlers
from llmpack.runtime.server.http.metrics import Metrics
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.state import ServerState
from llmpack.runtime.server.anthropic import routes as anthropic_routes
from llmpack.runtime.server.ollama import routes as ollama_routes
from llmpack.runtime.server.openai import routes as openai_routes
from llmpack.runtime.server.page import chat_routes, extract_routes, mcp_routes
from llmpack.runtime.chats.chats import ChatStore
from llmpack.runtime.server.responses import routes as responses_routes
from llmpack.runtime.server.responses.store import ResponseStore

STATIC_TYPES = {".html", ".css", ".js", ".svg", ".png", ".ico", ".webp", ".woff", ".woff2", ".json", ".map", ".txt"}


def webui_dir() -> Path:
    """The chat page's files; a real folder both installed and inside a PyInstaller bundle."""
    return Path(str(importlib.resources.files("llmpack.webui")))


def create_app(state: ServerState, options: ServerOptions | None = None) -> Flask:
    options = options or ServerOptions()
    web = options.webui_dir or webui_dir()
    app = Flask(__name__, static_folder=None, root_path=str(web))
    app.config["MAX_CONTENT_LENGTH"] = options.max_body
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.merge_slashes = False   # "//x" is a 404, not a redirect
    metrics = Metrics(state)
    app.extensions["llmpack"] = AppContext(state=state, options=options, metrics=metrics,   # in the app's data folder
                                           chats=ChatStore(state.files.path("chats.sqlite3")),
                                           responses=ResponseStore(state.files.path("responses.sqlite3")))
    security.install(app, options)
    install_error_handlers(app, options)
    app.register_blueprint(openai_routes.bp)
    app.register_blueprint(responses_routes.bp)
    app.register_blueprint(anthropic_routes.bp)
    app.register_blueprint(ollama_routes.bp)
    app.register_blueprint(chat_routes.bp)
    app.register_blueprint(extract_routes.bp)
    app.register_blueprint(mcp_routes.bp)

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
        body, status = state.health(authorized=security.authorized(options, request.headers))
        resp = jsonify(body)
        resp.status_code = status
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.get(security.CHALLENGE_PATH)
    @security.public("proves to a second launch that this server wrote the instance lock: an HMAC of the "
                     "caller's nonce under a secret only the lock file holds, so it tells a stranger nothing")
    def instance_challenge():
        nonce = request.args.get("nonce", "")
        if not state.instance or not 16 <= len(nonce) <= 128:
            abort(404)
        resp = jsonify({"instance": state.instance, "proof": security.instance_proof(state.instance_secret, nonce)})
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.get("/metrics")
    def metrics_route():
        data, content_type = metrics.render()
        return Response(data, content_type=content_type)

    return app
