"""The stateful half of the Responses API: `store` keeps a response, `previous_response_id` continues it.

LM Studio keeps responses so a client can send only the new turn; llama-server keeps none. Here a
stored response is the whole conversation it ended (the input messages, without `instructions`,
which OpenAI does not carry over, plus what the model answered) and the response object itself,
for GET /v1/responses/{id}. It lives in the per-user data folder (LLMPACK_DATA_DIR overrides it)
in one SQLite file readable by this user only (0600, its folder 0700), per model, bounded: at most
MAX_RESPONSES per model and MAX_ENTRY_BYTES each; the oldest go first.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

from llmpack import paths


MAX_RESPONSES = 1000        # per model; the oldest are dropped beyond it
MAX_ENTRY_BYTES = 8 << 20   # one stored conversation
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    model    TEXT NOT NULL,
    id       TEXT NOT NULL,
    created  REAL NOT NULL,
    messages TEXT NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (model, id)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (model, created);
"""


class StoreError(Exception):
    """The store could not keep or read a response (disk full, permissions); one line for the client."""


class ResponseStore:
    def __init__(self, path: Path | None = None, limit: int = MAX_RESPONSES) -> None:
        self._path = path
        self.limit = limit
        self._lock = threading.Lock()
        self._ready: Path | None = None   # the file whose schema is in place

    @property
    def path(self) -> Path:
        return self._path or paths.data_dir() / "responses.sqlite3"

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        if self._ready != path:
            try:   # this user's only (folder 0700, file and sidecars 0600), before SQLite writes a byte
                paths.private_store(path)
            except paths.PathsError as exc:
                raise OSError(str(exc)) from None
        conn = sqlite3.connect(path, timeout=10)
        if self._ready != path:
            conn.executescript(SCHEMA)
            self._ready = path
        return conn

    def put(self, model: str, response_id: str, messages: list[dict], response: dict) -> None:
        data = json.dumps(messages, ensure_ascii=False)
        body = json.dumps(response, ensure_ascii=False)
        if len(data) + len(body) > MAX_ENTRY_BYTES:
            raise StoreError(f"this conversation is over {MAX_ENTRY_BYTES >> 20} MB, too big to store; "
                             "send it whole with store: false")
        try:
            with self._lock, closing(self._connect()) as conn, conn:
                conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                             (model, response_id, time.time(), data, body))
                conn.execute("DELETE FROM responses WHERE model = ? AND id NOT IN (SELECT id FROM responses "
                             "WHERE model = ? ORDER BY created DESC LIMIT ?)", (model, model, self.limit))
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

