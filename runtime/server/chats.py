"""Saved conversations of the chat page: SQLite (standard library) in the per-user data folder.

Why on the server: the browser keeps localStorage per origin (127.0.0.1:PORT), so chats kept
there vanish whenever the app lands on another port, and every app that ever used a port shares
one list. Here each chat belongs to one model (ServedModel.model_key), and every launch of that model, on
any port, sees the same list. One file serves every llmpack app of this user; WAL mode lets
two running apps write it at once.

A chat is {"id", "title", "created", "updated", "mode", "messages": [{"role", "content",
"stats"?, "attachments"?}]}; times are milliseconds since the epoch (what the page's Date.now()
gives). A user message's attachments are [{"name", "kind", "size", "tokens", "text"}]: the text
that was sent, so the chat can be continued and exported as it was.
"""
from __future__ import annotations

import html
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import platformdirs

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    model    TEXT NOT NULL,
    id       TEXT NOT NULL,
    title    TEXT NOT NULL,
    mode     TEXT NOT NULL DEFAULT 'chat',
    created  INTEGER NOT NULL,
    updated  INTEGER NOT NULL,
    n_messages INTEGER NOT NULL,
    messages TEXT NOT NULL,
    PRIMARY KEY (model, id)
);
CREATE INDEX IF NOT EXISTS chats_by_model ON chats (model, updated DESC);
CREATE TABLE IF NOT EXISTS settings (
    model TEXT PRIMARY KEY,
    data  TEXT NOT NULL
);
"""
# The page's per-model settings (settings.js): a system prompt and sampling overrides.
SETTING_NUMBERS = ("temperature", "top_p", "top_k", "min_p", "max_tokens")
MAX_SYSTEM_PROMPT = 100_000
ROLES = ("system", "user", "assistant")
MODES = ("chat", "complete")
MAX_TITLE = 200
MAX_MESSAGES = 10_000
EXPORT_FORMAT = "llmpack-chat"
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ChatError(ValueError):
    """A chat the store refuses (bad shape); the message says what to fix."""


def data_dir() -> Path:
    """Per-user data folder (~/.local/share/llmpack, %LOCALAPPDATA%\\llmpack, ~/Library/Application
    Support/llmpack); LLMPACK_DATA_DIR overrides it (tests point it at a temporary folder)."""
    override = os.environ.get("LLMPACK_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("llmpack", appauthor=False))


def valid_id(chat_id: Any) -> bool:
    return isinstance(chat_id, str) and bool(_ID.fullmatch(chat_id))


def clean_chat(data: Any, *, chat_id: str | None = None) -> dict:
    """The chat as stored: known fields only, types checked. Raises ChatError."""
    if not isinstance(data, dict):
        raise ChatError("a chat must be a JSON object")
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) > MAX_MESSAGES:
        raise ChatError(f"'messages' must be a list of at most {MAX_MESSAGES} messages")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ChatError(f"messages[{i}] must be {{\"role\": one of {', '.join(ROLES)}, \"content\": text}}")
        item: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if isinstance(m.get("stats"), dict):
            item["stats"] = m["stats"]
        if m.get("attachments"):
            item["attachments"] = _clean_attachments(m["attachments"], i)
        clean.append(item)
    now = int(time.time() * 1000)
    title = data.get("title") if isinstance(data.get("title"), str) else ""
    created = data.get("created") if isinstance(data.get("created"), (int, float)) else now
    updated = data.get("updated") if isinstance(data.get("updated"), (int, float)) else created
    mode = data.get("mode") if data.get("mode") in MODES else "chat"
    return {"id": chat_id or data.get("id"), "title": (title.strip() or "Chat")[:MAX_TITLE], "mode": mode,
            "created": int(created), "updated": int(updated), "messages": clean}


def _clean_attachments(files: Any, i: int) -> list[dict]:
    if not isinstance(files, list) or len(files) > 32:
        raise ChatError(f"messages[{i}].attachments must be a list of at most 32 files")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("text"), str):
            raise ChatError(f"messages[{i}].attachments entries need 'name' and 'text' strings")
        item = {"name": f["name"][:MAX_TITLE], "text": f["text"]}
        item.update({k: f[k] for k in ("kind", "note") if isinstance(f.get(k), str)})
        item.update({k: int(f[k]) for k in ("size", "tokens") if isinstance(f.get(k), (int, float))})
        out.append(item)
    return out


class ChatStore:
    """The chats of every model in one SQLite file; opened on first use, so a server whose page
    is never used never creates it. Safe to call from any thread (one connection per call)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._ready = False
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path or data_dir() / "chats.sqlite3"

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        with self._lock:
            if not self._ready:
                path.parent.mkdir(parents=True, exist_ok=True)
                with closing(sqlite3.connect(path, timeout=10)) as con:
                    con.execute("PRAGMA journal_mode=WAL")
                    con.executescript(SCHEMA)
                self._ready = True
        con = sqlite3.connect(path, timeout=10)
        con.row_factory = sqlite3.Row   # rows read as dicts, by column name
        return con

    def list(self, model: str) -> list[dict]:
        """Summaries, newest first."""
        with closing(self._connect()) as con:
            rows = con.execute("SELECT id, title, mode, created, updated, n_messages "
                               "FROM chats WHERE model = ? ORDER BY updated DESC", (model,)).fetchall()
        return [dict(r) for r in rows]

    def get(self, model: str, chat_id: str) -> dict | None:
        with closing(self._connect()) as con:
            row = con.execute("SELECT id, title, mode, created, updated, messages FROM chats "
                              "WHERE model = ? AND id = ?", (model, chat_id)).fetchone()
        if row is None:
            return None
        return {**dict(row), "messages": json.loads(row["messages"])}

    def put(self, model: str, chat: dict) -> dict:
        """Insert or replace; `chat` comes from clean_chat()."""
        with closing(self._connect()) as con, con:
            con.execute("INSERT OR REPLACE INTO chats (model, id, title, mode, created, updated, n_messages, "
                        "messages) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (model, chat["id"], chat["title"], chat["mode"], chat["created"], chat["updated"],
                         len(chat["messages"]), json.dumps(chat["messages"], ensure_ascii=False)))
        return chat

    def delete(self, model: str, chat_id: str) -> bool:
        with closing(self._connect()) as con, con:
            return con.execute("DELETE FROM chats WHERE model = ? AND id = ?", (model, chat_id)).rowcount > 0

    def get_settings(self, model: str) -> dict:
        with closing(self._connect()) as con:
            row = con.execute("SELECT data FROM settings WHERE model = ?", (model,)).fetchone()
        return json.loads(row["data"]) if row else {}

    def put_settings(self, model: str, settings: dict) -> dict:
        """`settings` comes from clean_settings()."""
        with closing(self._connect()) as con, con:
            con.execute("INSERT OR REPLACE INTO settings (model, data) VALUES (?, ?)",
                        (model, json.dumps(settings, ensure_ascii=False)))
        return settings

    def import_chat(self, model: str, exported: Any) -> dict:
        """Store an exported chat (to_json's shape) under a new id, for this model."""
        if not isinstance(exported, dict) or exported.get("format") != EXPORT_FORMAT:
            raise ChatError(f"not an exported chat: expected a JSON object with \"format\": \"{EXPORT_FORMAT}\"")
        chat = clean_chat(exported, chat_id=uuid.uuid4().hex[:16])
        return self.put(model, chat)


def clean_settings(data: Any) -> dict:
    """Known keys only: system_prompt (text), the sampling numbers (a number, or null for "no
    limit" / the model's default). Raises ChatError."""
    if not isinstance(data, dict):
        raise ChatError("settings must be a JSON object")
    out: dict[str, Any] = {}
    prompt = data.get("system_prompt")
    if prompt is not None:
        if not isinstance(prompt, str) or len(prompt) > MAX_SYSTEM_PROMPT:
            raise ChatError(f"system_prompt must be text of at most {MAX_SYSTEM_PROMPT} characters")
        out["system_prompt"] = prompt
    for key in SETTING_NUMBERS:
        if key in data:
            value = data[key]
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ChatError(f"{key} must be a number or null")
            out[key] = value
    return out


def to_json(chat: dict, model_name: str) -> dict:
    """The export format (import_chat reads it back)."""
    return {"format": EXPORT_FORMAT, "version": 1, "model": model_name, "title": chat["title"],
            "mode": chat["mode"], "created": chat["created"], "updated": chat["updated"],
            "messages": chat["messages"]}


def to_markdown(chat: dict, model_name: str) -> str:
    """A readable transcript: title, model, then each turn under a heading."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat["updated"] / 1000))
    out = [f"# {chat['title']}", "", f"*{model_name} · {when}*", ""]
    if chat["mode"] == "complete":   # a text completion is one document
        out += ["".join(m["content"] for m in chat["messages"]), ""]
        return "\n".join(out)
    names = {"user": "You", "assistant": model_name, "system": "System"}
    for m in chat["messages"]:
        out += [f"## {names[m['role']]}", ""]
        for f in m.get("attachments", []):   # the name, with the text folded away
            out += [f"<details><summary>Attached: {html.escape(f['name'])}</summary>", "", "````text",
                    f["text"].replace("````", "` ` ` `"), "````", "", "</details>", ""]
        out += [m["content"].rstrip(), ""]
    return "\n".join(out)



def export_name(chat: dict, ext: str) -> str:
    stem = re.sub(r"[^\w\- ]+", "", chat["title"]).strip().replace(" ", "-")[:60] or "chat"
    return f"{stem}.{ext}"
