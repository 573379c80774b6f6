"""The stateful half of the Responses API: `store` keeps a response, `previous_response_id` continues it.

LM Studio keeps responses so a client can send only the new turn; llama-server keeps none. Here a
stored response is the whole conversation it ended (the input messages, without `instructions`,
which OpenAI does not carry over, plus what the model answered) and the response object itself,
for GET /v1/responses/{id}. It lives in the per-user data folder (LLMPACK_DATA_DIR overrides it)
in one SQLite file, opened as every store is (llmpack/stores.py: this user's only, WAL, a busy
timeout, a cap on the file), per model, bounded: at most
MAX_RESPONSES per model, MAX_ENTRY_BYTES each and MAX_MODEL_BYTES in all per model; the oldest go
first. Sizes are bytes of UTF-8, what the file holds, not characters: a conversation in Chinese or
emoji takes three or four bytes a character, and a limit in characters would let it grow past the cap.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

from llmpack.runtime.core.params import scrub
from llmpack.stores import StoreFile

MAX_RESPONSES = 1000        # per model; the oldest are dropped beyond it
MAX_ENTRY_BYTES = 8 << 20   # one stored conversation
MAX_MODEL_BYTES = 256 << 20   # all of one model's stored conversations; the oldest are dropped beyond it
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    model    TEXT NOT NULL,
    id       TEXT NOT NULL,
    created  REAL NOT NULL,
    messages TEXT NOT NULL,
    response TEXT NOT NULL,
    size     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (model, id)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (model, created);
"""
# A file written before `size` existed: the column is added and filled once, in bytes.
ADD_SIZE = ("ALTER TABLE responses ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
            "UPDATE responses SET size = LENGTH(CAST(messages AS BLOB)) + LENGTH(CAST(response AS BLOB))")


def _add_size(conn: sqlite3.Connection) -> None:
    if "size" not in {row[1] for row in conn.execute("PRAGMA table_info(responses)")}:
        with conn:
            for statement in ADD_SIZE:
                conn.execute(statement)


class StoreError(Exception):
    """The store could not keep or read a response (disk full, permissions); one line for the client."""


class ResponseStore:
    def __init__(self, path: Path | None = None, limit: int = MAX_RESPONSES,
                 total_bytes: int = MAX_MODEL_BYTES, entry_bytes: int = MAX_ENTRY_BYTES) -> None:
        self._file = StoreFile(path, "responses.sqlite3", SCHEMA, _add_size, unusable=OSError)
        self._connect = self._file.connect
        self.limit = limit
        self.total_bytes = total_bytes
        self.entry_bytes = min(entry_bytes, total_bytes)
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._file.path

    def put(self, model: str, response_id: str, messages: list[dict], response: dict) -> None:
        # a lone surrogate (a valid JSON escape, not UTF-8) cannot go into SQLite: the protocol fuzz's
        # "\ud800" in instructions, input, metadata or user was a 500 (issue 46); stored as U+FFFD
        data = scrub(json.dumps(messages, ensure_ascii=False))
        body = scrub(json.dumps(response, ensure_ascii=False))
        size = len(data.encode("utf-8", "surrogatepass")) + len(body.encode("utf-8", "surrogatepass"))
        if size > self.entry_bytes:
            raise StoreError(f"this conversation is {size / (1 << 20):.1f} MB, over the {self.entry_bytes >> 20} MB "
                             "that one stored response may take; send it whole with store: false")
        try:
            with self._lock, closing(self._connect()) as conn, conn:
                conn.execute("INSERT OR REPLACE INTO responses (model, id, created, messages, response, size) "
                             "VALUES (?, ?, ?, ?, ?, ?)", (model, response_id, time.time(), data, body, size))
                # newest first, the running total of bytes: whatever is past the count or the total goes
                conn.execute("DELETE FROM responses WHERE model = ? AND id IN (SELECT id FROM (SELECT id, "
                             "ROW_NUMBER() OVER newest AS n, SUM(size) OVER newest AS total FROM responses "
                             "WHERE model = ? WINDOW newest AS (ORDER BY created DESC, id DESC)) "
                             "WHERE n > ? OR total > ?)", (model, model, self.limit, self.total_bytes))
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"could not store the response in {self.path}: {exc}") from None

    def get(self, model: str, response_id: str) -> tuple[list[dict], dict] | None:
        try:
            with self._lock, closing(self._connect()) as conn:
                row = conn.execute("SELECT messages, response FROM responses WHERE model = ? AND id = ?",
                                   (model, response_id)).fetchone()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"could not read stored responses from {self.path}: {exc}") from None
        return (json.loads(row[0]), json.loads(row[1])) if row else None

    def delete(self, model: str, response_id: str) -> bool:
        try:
            with self._lock, closing(self._connect()) as conn, conn:
                return conn.execute("DELETE FROM responses WHERE model = ? AND id = ?",
                                    (model, response_id)).rowcount > 0
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"could not delete the stored response in {self.path}: {exc}") from None

