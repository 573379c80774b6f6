"""Saved conversations of the chat page: SQLite (standard library) in the per-user data folder.

Why on the server: the browser keeps localStorage per origin (127.0.0.1:PORT), so chats kept
there vanish whenever the app lands on another port, and every app that ever used a port shares
one list. Here each chat belongs to one model (ServedModel.model_key), and every launch of that model, on
any port, sees the same list. One file serves every llmpack app of this user, opened as every
store is (llmpack/stores.py: this user's only, WAL so two running apps write it at once).

What a chat holds and what is refused: chat_shape.py. Each saved chat has a version that every
save raises by one; a save names the version it was based on and is refused (ChatConflict) when
another tab or window saved in between, so a stale copy never replaces a newer one. An FTS5
table beside the chats (chat_search) finds chats by the words of their titles and messages.
"""
from __future__ import annotations

import json
import re
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from llmpack.stores import StoreFile
from llmpack.runtime.chats.chat_export import content_disposition, export_name, to_json, to_markdown
from llmpack.runtime.chats.chat_shape import (EXPORT_FORMAT, ChatError, branch, clean_chat, clean_presets,
                                                    clean_settings, merge_messages, search_text, valid_id)

__all__ = ["ChatConflict", "ChatError", "ChatStore", "clean_chat", "clean_presets", "clean_settings",
           "content_disposition", "export_name", "to_json", "to_markdown", "valid_id"]

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
CREATE TABLE IF NOT EXISTS presets (
    model TEXT PRIMARY KEY,
    data  TEXT NOT NULL
);
"""
# Columns added since the first release (a file made then gets them on first open).
NEW_COLUMNS = {"version": "INTEGER NOT NULL DEFAULT 0", "leaf": "TEXT", "system": "TEXT"}
SEARCH_TABLE = ("CREATE VIRTUAL TABLE chat_search USING fts5(title, body, model UNINDEXED, id UNINDEXED, "
                "tokenize = 'unicode61 remove_diacritics 2')")
MARK_ON, MARK_OFF = "\ue000", "\ue001"   # around a match in search results (private-use characters)
MAX_SEARCH_WORDS = 12


class ChatConflict(Exception):
    """A save based on a version that is no longer the saved one; `current` is the saved
    version (None: the chat was deleted meanwhile)."""

    def __init__(self, current: int | None) -> None:
        super().__init__(f"the saved chat is at version {current}")
        self.current = current


def _upgrade(con: sqlite3.Connection) -> None:
    """Bring a chat file from an earlier release up to this one: the new columns, and the search
    index filled from the chats already there. One app at a time (two may open the file at once)."""
    con.execute("BEGIN IMMEDIATE")
    have = {row[1] for row in con.execute("PRAGMA table_info(chats)")}
    for name, kind in NEW_COLUMNS.items():
        if name not in have:
            con.execute(f"ALTER TABLE chats ADD COLUMN {name} {kind}")
    if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'chat_search'").fetchone() is None:
        con.execute(SEARCH_TABLE)
        for model, chat_id, title, messages in con.execute("SELECT model, id, title, messages FROM chats").fetchall():
            con.execute("INSERT INTO chat_search (title, body, model, id) VALUES (?, ?, ?, ?)",
                        (title, search_text({"messages": json.loads(messages)}), model, chat_id))
    con.commit()


def _parts(text: str) -> list[list[Any]]:
    """A search result's text as [[text, is_match], ...], for the page to mark up safely."""
    out: list[list[Any]] = []
    for i, piece in enumerate(re.split(f"[{MARK_ON}{MARK_OFF}]", text)):
        if piece:
            out.append([piece, i % 2 == 1])
    return out


class ChatStore:
    """The chats of every model in one SQLite file; opened on first use, so a server whose page
    is never used never creates it. Safe to call from any thread (one connection per call)."""

    def __init__(self, path: Path | None = None) -> None:
        self._file = StoreFile(path, "chats.sqlite3", SCHEMA, _upgrade)

    @property
    def path(self) -> Path:
        return self._file.path

    def _connect(self) -> sqlite3.Connection:
        con = self._file.connect()
        con.row_factory = sqlite3.Row   # rows read as dicts, by column name
        return con

    def list(self, model: str) -> list[dict]:
        """Summaries, newest first."""
        with closing(self._connect()) as con:
            rows = con.execute("SELECT id, title, mode, created, updated, n_messages "
                               "FROM chats WHERE model = ? ORDER BY updated DESC", (model,)).fetchall()
        return [dict(r) for r in rows]

    def get(self, model: str, chat_id: str) -> dict | None:
        """The whole chat (every branch) with its `version`; the leaf and system prompt when it has them."""
        with closing(self._connect()) as con:
            row = con.execute("SELECT id, title, mode, created, updated, version, leaf, system, messages FROM chats "
                              "WHERE model = ? AND id = ?", (model, chat_id)).fetchone()
        if row is None:
            return None
        chat = {k: row[k] for k in ("id", "title", "mode", "created", "updated", "version", "leaf", "system")
                if row[k] is not None}
        return {**chat, "messages": json.loads(row["messages"])}

    def put(self, model: str, chat: dict, base_version: int | None = None, merge: bool = False) -> dict:
        """Save `chat` (from clean_chat()) as the next version of the one saved at `base_version`
        (0: a new chat); ChatConflict when the saved chat is at another version, or is gone.
        merge: instead of refusing a stale save, keep the saved messages and add this one's
        (merge_messages; a page's last save as it closes, which cannot load and retry).
        base_version None saves whatever is there (the store's own callers). Returns the chat
        with its new `version`."""
        with closing(self._connect()) as con, con:
            row = con.execute("SELECT version, messages FROM chats WHERE model = ? AND id = ?",
                              (model, chat["id"])).fetchone()
            current = None if row is None else row["version"]
            if base_version is not None and (current or 0) != base_version or (row is None and base_version):
                both = merge_messages(json.loads(row["messages"]), chat["messages"]) if merge and row else None
                if both is None:
                    raise ChatConflict(current)
                chat = {**chat, "messages": both}
            values = (chat["title"], chat["mode"], chat["created"], chat["updated"], len(branch(chat)),
                      json.dumps(chat["messages"], ensure_ascii=False), chat.get("leaf"), chat.get("system"))
            version = (current or 0) + 1
            con.execute("INSERT OR REPLACE INTO chats (title, mode, created, updated, n_messages, messages, leaf, "
                        "system, model, id, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (*values, model, chat["id"], version))
            con.execute("DELETE FROM chat_search WHERE model = ? AND id = ?", (model, chat["id"]))
            con.execute("INSERT INTO chat_search (title, body, model, id) VALUES (?, ?, ?, ?)",
                        (chat["title"], search_text(chat), model, chat["id"]))
        return {**chat, "version": version}

    def delete(self, model: str, chat_id: str) -> bool:
        with closing(self._connect()) as con, con:
            con.execute("DELETE FROM chat_search WHERE model = ? AND id = ?", (model, chat_id))
            return con.execute("DELETE FROM chats WHERE model = ? AND id = ?", (model, chat_id)).rowcount > 0

    def search(self, model: str, query: str, limit: int = 30) -> list[dict]:
        """This model's chats whose title or messages hold every word of `query` (a word may be
        the start of a longer one: "boil" finds "boiler"), best first: {id, title, mode,
        updated, title_parts, snippet}, the parts as [[text, is_match], ...]."""
        words = re.findall(r"\w+", query)[:MAX_SEARCH_WORDS]
        if not words:
            return []
        match = " ".join(f'"{w}"*' for w in words)   # \w+ holds no quote; each word a prefix
        with closing(self._connect()) as con:
            rows = con.execute(
                "SELECT s.id AS id, c.title AS title, c.mode AS mode, c.updated AS updated, "
                "highlight(chat_search, 0, ?, ?) AS marked, snippet(chat_search, 1, ?, ?, '…', 14) AS snippet "
                "FROM chat_search s JOIN chats c ON c.model = s.model AND c.id = s.id "
                "WHERE chat_search MATCH ? AND s.model = ? ORDER BY rank LIMIT ?",
                (MARK_ON, MARK_OFF, MARK_ON, MARK_OFF, match, model, limit)).fetchall()
        return [{"id": r["id"], "title": r["title"], "mode": r["mode"], "updated": r["updated"],
                 "title_parts": _parts(r["marked"]), "snippet": _parts(r["snippet"])} for r in rows]

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

    def get_presets(self, model: str) -> list[dict]:
        with closing(self._connect()) as con:
            row = con.execute("SELECT data FROM presets WHERE model = ?", (model,)).fetchone()
        return json.loads(row["data"]) if row else []

    def put_presets(self, model: str, presets: list[dict]) -> list[dict]:
        """`presets` comes from clean_presets()."""
        with closing(self._connect()) as con, con:
            con.execute("INSERT OR REPLACE INTO presets (model, data) VALUES (?, ?)",
                        (model, json.dumps(presets, ensure_ascii=False)))
        return presets

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
            for table in ("settings", "presets", "chat_search"):
                con.execute(f"DELETE FROM {table} WHERE model = ?", (model,))
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
        return self.put(model, chat, base_version=0)


