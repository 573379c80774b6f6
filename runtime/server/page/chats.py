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
import math
import os
import re
import sqlite3
import threading
import time
import unicodedata
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote

import platformdirs

from llmpack.runtime.server.core.params import scrub   # lone surrogates -> U+FFFD, as requests get

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
# The page's per-model settings (settings.js): a system prompt and sampling overrides, each a
# number in the range the page's own form accepts (settings.js FIELDS), or null. (low, high,
# low_open, whole): a whole number must be written without a fraction.
SETTING_NUMBERS: dict[str, tuple[float, float, bool, bool]] = {
    "temperature": (0, 100, False, False), "top_p": (0, 1, True, False), "top_k": (-1, 2**31 - 1, False, True),
    "min_p": (0, 1, False, False), "max_tokens": (1, 2**31 - 1, False, True)}
MAX_SYSTEM_PROMPT = 100_000
ROLES = ("system", "user", "assistant")
MODES = ("chat", "complete")
MAX_TITLE = 200
MAX_MESSAGES = 10_000
MAX_TIME_MS = 8_640_000_000_000_000   # the last time a JavaScript Date holds; far inside SQLite's int64
MAX_STATS = 32
MAX_STAT_TEXT = 200
MAX_STAT_NUMBER = 1e15
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
    """The chat as stored: known fields only, types and number ranges checked, so that nothing the
    page cannot read back (Infinity, a time past JavaScript's last date, an integer SQLite cannot
    hold) is ever stored. Raises ChatError naming the field."""
    if not isinstance(data, dict):
        raise ChatError("a chat must be a JSON object")
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) > MAX_MESSAGES:
        raise ChatError(f"'messages' must be a list of at most {MAX_MESSAGES} messages")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ChatError(f"messages[{i}] must be {{\"role\": one of {', '.join(ROLES)}, \"content\": text}}")
        item: dict[str, Any] = {"role": m["role"], "content": scrub(m["content"])}
        if m.get("stats") is not None:
            item["stats"] = _stats(m["stats"], f"messages[{i}].stats")
        if m.get("attachments"):
            item["attachments"] = _clean_attachments(m["attachments"], i)
        clean.append(item)
    now = int(time.time() * 1000)
    title = scrub(data["title"]) if isinstance(data.get("title"), str) else ""
    created = _time(data, "created", now)
    updated = _time(data, "updated", created)
    mode = data.get("mode") if data.get("mode") in MODES else "chat"
    return {"id": chat_id or data.get("id"), "title": (title.strip() or "Chat")[:MAX_TITLE], "mode": mode,
            "created": created, "updated": updated, "messages": clean}


def _number(value: Any) -> bool:
    """A JSON number that is finite (json.loads reads 1e400 as inf); true/false are not numbers."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))   # 10**400 is an int


def _time(data: dict, key: str, default: int) -> int:
    value = data.get(key)
    if value is None:
        return default
    if not _number(value) or not 0 <= value <= MAX_TIME_MS:
        raise ChatError(f"'{key}' must be a time in milliseconds since 1970, from 0 to {MAX_TIME_MS}")
    return int(value)


def _stats(stats: Any, where: str) -> dict:
    """A reply's statistics as the page shows them: a few flat numbers, flags and words."""
    if not isinstance(stats, dict) or len(stats) > MAX_STATS:
        raise ChatError(f"{where} must be an object of at most {MAX_STATS} entries")
    for key, value in stats.items():
        ok = (value is None or isinstance(value, bool) or (_number(value) and abs(value) <= MAX_STAT_NUMBER)
              or (isinstance(value, str) and len(value) <= MAX_STAT_TEXT))
        if len(key) > MAX_STAT_TEXT or not ok:
            raise ChatError(f"{where}.{key[:40]} must be a number of at most {MAX_STAT_NUMBER:.0e}, "
                            f"true/false, null or text of at most {MAX_STAT_TEXT} characters")
    return {scrub(k): (scrub(v) if isinstance(v, str) else v) for k, v in stats.items()}


def _clean_attachments(files: Any, i: int) -> list[dict]:
    if not isinstance(files, list) or len(files) > 32:
        raise ChatError(f"messages[{i}].attachments must be a list of at most 32 files")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("text"), str):
            raise ChatError(f"messages[{i}].attachments entries need 'name' and 'text' strings")
        item = {"name": scrub(f["name"][:MAX_TITLE]), "text": scrub(f["text"])}
        item.update({k: scrub(f[k][:MAX_STAT_TEXT]) for k in ("kind", "note") if isinstance(f.get(k), str)})
        for k in ("size", "tokens"):
            if f.get(k) is None:
                continue
            if not _number(f[k]) or not 0 <= f[k] <= MAX_STAT_NUMBER:
                raise ChatError(f"messages[{i}].attachments[].{k} must be a number from 0 to {MAX_STAT_NUMBER:.0e}")
            item[k] = int(f[k])
        out.append(item)
    return out


class ChatStore:
    """The chats of every model in one SQLite file; opened on first use, so a server whose page
    is never used never creates it. Safe to call from any thread (one connection per call)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._ready: Path | None = None   # the file whose folder and tables are made
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path or data_dir() / "chats.sqlite3"

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        with self._lock:
            if self._ready != path:   # LLMPACK_DATA_DIR may name another folder since (each test has its own)
                path.parent.mkdir(parents=True, exist_ok=True)
                with closing(sqlite3.connect(path, timeout=10)) as con:
                    con.execute("PRAGMA journal_mode=WAL")
                    con.executescript(SCHEMA)
                self._ready = path
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

    def usage(self, model: str) -> tuple[int, int, bool]:
        """(chats, bytes of their text, whether settings are saved) of one model; nothing is
        created when there is no chat file yet (`--forget` asks before it removes anything)."""
        if not self.path.is_file():
            return 0, 0, False
        with closing(self._connect()) as con:
            n, size = con.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(messages AS BLOB)) + LENGTH(title)), 0) "
                                  "FROM chats WHERE model = ?", (model,)).fetchone()
            settings = con.execute("SELECT 1 FROM settings WHERE model = ?", (model,)).fetchone() is not None
        return int(n), int(size), settings

    def forget(self, model: str) -> int:
        """Delete every chat and the settings of one model (`--forget`); how many chats went."""
        if not self.path.is_file():
            return 0
        with closing(self._connect()) as con, con:
            n = con.execute("DELETE FROM chats WHERE model = ?", (model,)).rowcount
            con.execute("DELETE FROM settings WHERE model = ?", (model,))
        try:
            with closing(self._connect()) as con:
                con.execute("VACUUM")   # give the space back, not just mark it free
        except sqlite3.OperationalError:   # another app has the file busy: the rows are gone all the same
            pass
        return n

    def import_chat(self, model: str, exported: Any) -> dict:
        """Store an exported chat (to_json's shape) under a new id, for this model. A chat whose
        messages this model already has word for word is not stored twice: that one comes back,
        with "duplicate": True."""
        if not isinstance(exported, dict) or exported.get("format") != EXPORT_FORMAT:
            raise ChatError(f"not an exported chat: expected a JSON object with \"format\": \"{EXPORT_FORMAT}\"")
        chat = clean_chat(exported, chat_id=uuid.uuid4().hex[:16])
        with closing(self._connect()) as con:
            row = con.execute("SELECT id, title, mode, created, updated FROM chats WHERE model = ? AND messages = ?",
                              (model, json.dumps(chat["messages"], ensure_ascii=False))).fetchone()
        if row is not None:
            return {**dict(row), "duplicate": True}
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
        out["system_prompt"] = scrub(prompt)
    for key, (low, high, low_open, whole) in SETTING_NUMBERS.items():
        if key in data:
            out[key] = _setting(key, data[key], low, high, low_open, whole)
    return out


def _setting(key: str, value: Any, low: float, high: float, low_open: bool, whole: bool) -> Any:
    if value is None:
        return None
    in_range = _number(value) and (low < value if low_open else low <= value) and value <= high
    if not in_range or (whole and not float(value).is_integer()):
        kind = "a whole number" if whole else "a number"
        raise ChatError(f"{key} must be {kind} {'above' if low_open else 'from'} {low} to {high}, or null")
    return int(value) if whole else value


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
        out += [close_fences("".join(m["content"] for m in chat["messages"])), ""]
        return "\n".join(out)
    names = {"user": "You", "assistant": model_name, "system": "System"}
    for m in chat["messages"]:
        out += [f"## {names[m['role']]}", ""]
        for f in m.get("attachments", []):   # the name, with the text folded away
            out += [f"<details><summary>Attached: {html.escape(f['name'])}</summary>", "", "````text",
                    f["text"].replace("````", "` ` ` `"), "````", "", "</details>", ""]
        out += [close_fences(m["content"].rstrip()), ""]
    return "\n".join(out)


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def close_fences(text: str) -> str:
    """`text` with a code fence left open (a reply cut off inside a code block) closed at its
    end, so the turns after it are not read as code. Fences as CommonMark has them: three or more
    backticks or tildes, closed by at least as many of the same; a backtick fence's info string
    holds no backtick."""
    opener = ""
    for line in text.splitlines():
        m = _FENCE.fullmatch(line)
        if m is None:
            continue
        fence, rest = m.groups()
        if not opener:
            if not (fence[0] == "`" and "`" in rest):
                opener = fence
        elif fence[0] == opener[0] and len(fence) >= len(opener) and not rest.strip():
            opener = ""
    return f"{text}\n{opener}" if opener else text


def export_name(chat: dict, ext: str) -> str:
    """The file name an export is offered under: the title's letters, digits, '-' and '_' (in any
    script: titles come from the first message, in whatever language the user writes)."""
    stem = "-".join(re.sub(r"[^\w\- ]+", "", chat["title"]).split())[:60] or "chat"
    return f"{stem}.{ext}"


def content_disposition(name: str) -> str:
    """`attachment` with RFC 6266's two names: `filename*=UTF-8''...` (RFC 5987, percent-encoded:
    HTTP headers are Latin-1, so the raw name of a Russian or emoji title cannot be sent) and an
    ASCII `filename` for clients that know no better (accents dropped, other letters lost)."""
    stem, dot, ext = name.rpartition(".")
    ascii_stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode()
    ascii_stem = re.sub(r"[^A-Za-z0-9_\-]+", "", ascii_stem).strip("-") or "chat"
    fallback = f"{ascii_stem}{dot}{ext}"
    if fallback == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
