"""/api/chats and /api/settings: the chat page's saved conversations and settings (chats.ChatStore),
behind a per-launch secret.

Like Jupyter's token: each launch makes a random secret and opens the browser at
`/?token=SECRET` (through a private redirect file, launch.open_browser, so the secret is never on
a command line). The page takes the secret from its address once, keeps it in localStorage, which
browsers keep per origin (scheme, host *and port*), removes it from the address bar, and sends it
as the `X-Llmpack-Token` header. No cookie: browsers send cookies to every port of a host, so a
cookie would reach any other local server the browser visits. /api/* answers only requests that
carry the secret *and* the `X-Llmpack-Chat` header, which another web page cannot add without a
CORS preflight that this server never grants. Other local processes and other web pages therefore
cannot read or change the chats; the OpenAI API (/v1) keeps its own rules (--api-key).

    GET    /api/chats                       summaries of this model's chats, newest first
    GET    /api/chats/ID                    one chat
    PUT    /api/chats/ID                    save a chat: {..., "base_version": the version it was based on,
                                            0 for a new chat}; 409 (chat_conflict) when another tab or
                                            window saved it since (or deleted it): load it again;
                                            "merge": true keeps both sides' messages instead (a
                                            page's last save as it closes)
    DELETE /api/chats/ID
    GET    /api/chats/ID/export?format=json|markdown
    POST   /api/chats/import                an exported JSON chat, stored under a new id (unless this
                                            model has its messages already: then "duplicate": true)
    GET    /api/search?q=WORDS              this model's chats holding the words, matches marked
    GET    /api/settings, PUT /api/settings the page's settings for this model (system prompt, sampling)
    GET    /api/presets, PUT /api/presets   named presets (a system prompt + sampling), {"presets": [...]}
"""
from __future__ import annotations

import hmac
import json

from flask import Blueprint, Response, jsonify, request

from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.chats.chats import (
    ChatConflict,
    ChatError,
    ChatStore,
    clean_chat,
    clean_presets,
    clean_settings,
    content_disposition,
    export_name,
    to_json,
    to_markdown,
    valid_id,
)
from llmpack.runtime.server.http.context import app_context, json_body, ready_model
from llmpack.runtime.server.http.security import public

bp = Blueprint("chats", __name__, url_prefix="/api")
TOKEN_HEADER = "X-Llmpack-Token"
MARK_HEADER = "X-Llmpack-Chat"
# Not the API key: the page opened by the app holds this launch's secret, not the key.
OWN_SECRET = "guarded by this launch's chat secret (_guard), which only the page the app opened holds"


def _store() -> ChatStore:
    return app_context().chats


def _matches(given: str | None, token: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


@bp.before_request
def _guard():
    opts = app_context().options
    if not opts.chat_token:
        raise ApiError(404, "Saved chats are off for this server.", code="chats_disabled")
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        raise ApiError(403, "Saved chats are only for the chat page itself.", type="permission_error",
                       code="cross_site")
    given = request.headers.get(TOKEN_HEADER)
    if not request.headers.get(MARK_HEADER) or not _matches(given, opts.chat_token):
        raise ApiError(401, "Saved chats need this launch's secret: open the link the app printed when it "
                       "started (it ends in ?token=...).", type="permission_error", code="chat_token_required")


guard = _guard   # the same checks on the page's other /api/* routes (mcp_routes.py)


def _key() -> tuple[str, str]:
    model = ready_model(app_context().state)
    return model.model_key, model.display_name


def _chat_or_404(key: str, chat_id: str) -> dict:
    chat = _store().get(key, chat_id) if valid_id(chat_id) else None
    if chat is None:
        raise ApiError(404, f"No saved chat {chat_id!r} for this model.", code="chat_not_found")
    return chat


def _no_store(resp: Response) -> Response:
    resp.headers["Cache-Control"] = "no-store"
    return resp


@public(OWN_SECRET)
@bp.get("/chats")
def list_chats():
    key, _ = _key()
    return _no_store(jsonify({"object": "list", "data": _store().list(key)}))


@public(OWN_SECRET)
@bp.get("/chats/<chat_id>")
def get_chat(chat_id: str):
    key, _ = _key()
    return _no_store(jsonify(_chat_or_404(key, chat_id)))


@public(OWN_SECRET)
@bp.put("/chats/<chat_id>")
def put_chat(chat_id: str):
    key, _ = _key()
    if not valid_id(chat_id):
        raise ApiError(400, "A chat id is 1-64 letters, digits, '-' or '_'.", code="invalid_chat_id")
    body = json_body()
    base = body.get("base_version", 0) if isinstance(body, dict) else 0
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise ApiError(400, "Cannot save this chat: 'base_version' must be the version it was based on "
                       "(0 for a new chat).", param="base_version", code="invalid_chat")
    merge = body.get("merge", False) if isinstance(body, dict) else False
    if not isinstance(merge, bool):
        raise ApiError(400, "Cannot save this chat: 'merge' must be true or false.", param="merge", code="invalid_chat")
    try:
        chat = _store().put(key, clean_chat(body, chat_id=chat_id), base_version=base, merge=merge)
    except ChatError as exc:
        raise ApiError(400, f"Cannot save this chat: {exc}.", code="invalid_chat") from None
    except ChatConflict as exc:
        now = "was deleted" if exc.current is None else f"is at version {exc.current}"
        raise ApiError(409, f"This chat was changed in another tab or window since version {base} was loaded "
                       f"(it {now}): load it again, then save.", param="base_version",
                       code="chat_conflict") from None
    return _no_store(jsonify({"id": chat["id"], "updated": chat["updated"], "version": chat["version"]}))


@public(OWN_SECRET)
@bp.get("/search")
def search_chats():
    key, _ = _key()
    query = request.args.get("q", "")
    if len(query) > 500:
        raise ApiError(400, "Search for at most 500 characters.", param="q", code="invalid_query")
    return _no_store(jsonify({"object": "list", "data": _store().search(key, query)}))


@public(OWN_SECRET)
@bp.delete("/chats/<chat_id>")
def delete_chat(chat_id: str):
    key, _ = _key()
    if not (valid_id(chat_id) and _store().delete(key, chat_id)):
        raise ApiError(404, f"No saved chat {chat_id!r} for this model.", code="chat_not_found")
    return _no_store(jsonify({"id": chat_id, "deleted": True}))


@public(OWN_SECRET)
@bp.get("/chats/<chat_id>/export")
def export_chat(chat_id: str):
    key, name = _key()
    chat = _chat_or_404(key, chat_id)
    fmt = request.args.get("format", "json")
    if fmt == "json":
        body, mime, ext = json.dumps(to_json(chat, name), ensure_ascii=False, indent=2), "application/json", "json"
    elif fmt == "markdown":
        body, mime, ext = to_markdown(chat, name), "text/markdown; charset=utf-8", "md"
    else:
        raise ApiError(400, "format must be 'json' or 'markdown'.", param="format", code="invalid_format")
    resp = Response(body, content_type=mime)
    resp.headers["Content-Disposition"] = content_disposition(export_name(chat, ext))
    return _no_store(resp)


@public(OWN_SECRET)
@bp.post("/chats/import")
def import_chat():
    key, _ = _key()
    try:
        chat = _store().import_chat(key, json_body())
    except ChatError as exc:
        raise ApiError(400, f"Cannot import this file: {exc}.", code="invalid_chat") from None
    return _no_store(jsonify({k: chat[k] for k in ("id", "title", "mode", "created", "updated", "duplicate")
                              if k in chat}))


@public(OWN_SECRET)
@bp.get("/settings")
def get_settings():
    key, _ = _key()
    return _no_store(jsonify({"data": _store().get_settings(key)}))


def _save(clean, put, what: str) -> object:
    """Check a settings-like body with `clean` and store it with `put`: a 400 naming the field, nothing stored."""
    key, _ = _key()
    try:
        return put(key, clean(json_body()))
    except ChatError as exc:
        raise ApiError(400, f"Cannot save these {what}: {exc}.", code=f"invalid_{what}") from None


@public(OWN_SECRET)
@bp.put("/settings")
def put_settings():
    return _no_store(jsonify({"data": _save(clean_settings, _store().put_settings, "settings")}))


@public(OWN_SECRET)
@bp.get("/presets")
def get_presets():
    key, _ = _key()
    return _no_store(jsonify({"presets": _store().get_presets(key)}))


@public(OWN_SECRET)
@bp.put("/presets")
def put_presets():
    return _no_store(jsonify({"presets": _save(clean_presets, _store().put_presets, "presets")}))
