"""One way to open a store. The SQLite files llmpack keeps in the per-user data folder (the saved
chats, the Responses store, the document index) each hold their own schema, and open through
`StoreFile`, which sets what they must share:

- this user's only: the folder 0700, the file and its -wal/-shm/-journal 0600, made so before
  SQLite writes a byte, whenever a path is opened for the first time (paths.private_store);
- WAL: two running apps (two models, two windows) read and write one file at once;
- a busy timeout (BUSY_S): one app waits for the other's transaction instead of failing;
- a cap on the file (`max_bytes`, SQLite's max_page_count): a write past it fails with
  "database or disk is full", which each store words as its own error, instead of filling the
  disk. Each store's own bounds (per model, per entry, the index's text) stay well below it.
"""
from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Callable

from llmpack import paths

BUSY_S = 10.0                 # how long a write waits for another app's transaction
MAX_FILE_BYTES = 1 << 30      # every store's file, whatever its own bounds say


class StoreFile:
    """One store's file: `path`, else `name` in the data folder (read at each call: LLMPACK_DATA_DIR
    may name another folder since, as each test does). `schema` is run once per path, then
    `upgrade` (a file from an earlier release). A folder or file that cannot be made private is
    raised as `unusable` (the store's own error, one line). Safe from any thread: one connection per call."""

    def __init__(self, path: Path | None, name: str, schema: str,
                 upgrade: Callable[[sqlite3.Connection], None] | None = None, max_bytes: int = MAX_FILE_BYTES,
                 unusable: Callable[[str], Exception] = paths.PathsError) -> None:
        self._path, self.name, self.schema, self.upgrade, self.max_bytes = path, name, schema, upgrade, max_bytes
        self.unusable = unusable
        self._ready: Path | None = None   # the file whose folder, modes and tables are in place
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path or paths.data_dir() / self.name

    def connect(self) -> sqlite3.Connection:
        """A new connection; `unusable` or sqlite3.Error."""
        path = self.path
        with self._lock:
            if self._ready != path:
                try:
                    paths.private_store(path)
                except paths.PathsError as exc:
                    raise self.unusable(str(exc)) from None
                with closing(self._open(path)) as con:
                    con.execute("PRAGMA journal_mode=WAL")
                    con.executescript(self.schema)
                    if self.upgrade is not None:
                        self.upgrade(con)
                self._ready = path
        return self._open(path)

    def _open(self, path: Path) -> sqlite3.Connection:
        con = sqlite3.connect(path, timeout=BUSY_S)
        try:
            (page,) = con.execute("PRAGMA page_size").fetchone()
            con.execute(f"PRAGMA max_page_count = {max(1, self.max_bytes // page)}")
            con.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            con.close()
            raise
        return con
