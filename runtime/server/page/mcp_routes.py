"""The chat page's tools that need the app: MCP servers (a proxy to the configured ones only,
mcp_hub.py) and searching the files attached to a chat in the document index.

    GET  /api/mcp             every server: {servers: [{name, source, transport, url?, status, error?, note?, tools}]}
    PUT  /api/mcp/servers     {servers: [{name, url, headers?}]}: the servers added in the page's
                              Settings (URLs only: only --mcp-config starts programs); connects
                              every server not up, answers as GET
    POST /api/mcp/call        {server, tool, arguments} -> {text, is_error}; 404 for a server or
                              tool that is not configured, 502/503/504 when the server fails
    POST /api/tools/search    {query, files: [{file_id, name}]} -> {hits: [{name, page, text}]}

Never an open proxy: a call names a configured server and one of the tools it listed, never a URL.
The routes take both keys: the API key (--api-key, like every route not marked public) and this
launch's chat secret with the same-origin checks of every /api/* route (chat_routes.guard), so only
the page the app opened, or whoever holds both, can add a server or make a call.
"""
from __future__ import annotations

import atexit
import threading

from flask import Blueprint, current_app, jsonify, request

from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.core.params import scrub
from llmpack.runtime.documents.index import IndexUnusable
from llmpack.runtime.server.http.context import app_context, json_body
from llmpack.runtime.server.page.chat_routes import guard
from llmpack.runtime.tools.mcp_config import McpConfigError, load_config, page_servers

bp = Blueprint("tools", __name__, url_prefix="/api")
_HUB_KEY = "llmpack.mcp"
_hub_lock = threading.Lock()
MAX_SEARCH_FILES = 32
MAX_HITS = 6
MAX_QUERY = 1000


@bp.before_request
def _both_keys():
    """The chat secret's checks, after the API key's (http/security.py): a request that has the key but
    not the page's secret is forbidden (403), so a 401 here always means the API key."""
    try:
        guard()
    except ApiError as exc:
        if exc.status != 401:
            raise
        raise ApiError(403, exc.message, type="permission_error", code=exc.code) from None


def _hub():
    """The app's hub, made on first use from --mcp-config (checked again: the file may have changed)."""
    try:
        from llmpack.runtime.tools.mcp_hub import McpHub   # lazy: the MCP SDK loads only when the page uses tools
    except ImportError as exc:   # a build made without the SDK: the built-in tools still work
        raise ApiError(501, f"This copy of llmpack has no MCP support ({exc.name or exc} is missing): the built-in "
                       "tools work; for MCP servers, use an llmpack installed with pip.", code="mcp_unavailable") from None
    with _hub_lock:
        hub = current_app.extensions.get(_HUB_KEY)
        if hub is None:
            path = app_context().options.mcp_config
            try:
                configured = load_config(path) if path else ()
            except McpConfigError as exc:
                raise ApiError(500, str(exc), code="mcp_config") from None
            hub = current_app.extensions[_HUB_KEY] = McpHub(configured)
            atexit.register(hub.close)
        return hub


@bp.get("/mcp")
def mcp_list():
    return jsonify({"servers": _hub().listing()})


@bp.put("/mcp/servers")
def mcp_servers():
    try:
        specs = page_servers(json_body())
    except McpConfigError as exc:
        raise ApiError(400, str(exc), param="servers", code="invalid_mcp_server") from None
    return jsonify({"servers": _hub().sync(specs)})


def _object() -> dict:
    """The request's JSON, which these routes take only as an object."""
    body = json_body()
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_request")
    return body


@bp.post("/mcp/call")
def mcp_call():
    body = _object()
    hub = _hub()
    from llmpack.runtime.tools.mcp_hub import McpCallError   # lazy: as _hub
    server, tool, arguments = body.get("server"), body.get("tool"), body.get("arguments", {})
    if not isinstance(server, str) or not isinstance(tool, str):
        raise ApiError(400, "'server' and 'tool' must name a configured MCP server and one of its tools",
                       param="server", code="invalid_mcp_call")
    if not isinstance(arguments, dict):
        raise ApiError(400, "'arguments' must be a JSON object", param="arguments", code="invalid_mcp_call")
    try:
        # waitress notices a client that hung up (the page's Stop) while its request runs
        gone = request.environ.get("waitress.client_disconnected")
        return jsonify({"text": hub.call(server, tool, arguments, gone), "is_error": False})
    except McpCallError as exc:
        if exc.status == 200:   # the tool ran and said it failed: that is its result
            return jsonify({"text": exc.message, "is_error": True})
        raise ApiError(exc.status, exc.message, code="mcp_call_failed") from None


@bp.post("/tools/search")
def search_files():
    body = _object()
    query, files = body.get("query"), body.get("files")
    if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY:
        raise ApiError(400, f"'query' must be text of 1 to {MAX_QUERY} characters", param="query", code="invalid_query")
    if not isinstance(files, list) or len(files) > MAX_SEARCH_FILES or not all(
            isinstance(f, dict) and isinstance(f.get("file_id"), str) for f in files):
        raise ApiError(400, f"'files' must be a list of at most {MAX_SEARCH_FILES} {{\"file_id\", \"name\"}}",
                       param="files", code="invalid_files")
    # lone surrogates (valid JSON escapes, not UTF-8) cannot reach SQLite: U+FFFD, as requests get
    query = scrub(query)
    names = {scrub(f["file_id"]): scrub(str(f.get("name") or "file"))[:200] for f in files}
    try:
        hits = app_context().state.files.index.search(list(names), query, limit=MAX_HITS)   # this app's index
    except IndexUnusable as exc:
        raise ApiError(503, str(exc), code="index_unusable") from None
    return jsonify({"hits": [{"name": names.get(h.doc, "file"), "page": h.page, "section": h.heading,
                              "text": h.text} for h in hits]})
