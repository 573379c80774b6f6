"""What one app holds of the files and sound its requests bring, so two apps in one process (two
servers, a server and an `LLM`, or tests side by side) share none of it: the sandbox that reads
documents, the index of long documents in the app's own data folder, the last few documents
read, the last sound clips decoded, and the rounds that summarise a long file for a question
about all of it. vLLM keeps such state on its serving objects; here the
server's state (http/state.py `ServerState.files`) and the offline `LLM` each make one, and hand
it to their ServedModel (`ServedModel.files`), which every core function already takes.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from llmpack.lru import LruCache
from llmpack.runtime.documents.extract import Document
from llmpack.runtime.documents.index import INDEX_FILE, DocumentIndex, Indexed
from llmpack.runtime.documents.overview import Part
from llmpack.runtime.documents.sandbox import Sandbox

READ_KEPT = 8             # documents read, by content: a chat re-sends its documents every turn
CLIPS_BYTES = 64 << 20    # decoded sound, by content and rate: a chat re-sends its clips


class AppFiles:
    """`data_dir`: where this app keeps its document index (None: the per-user data folder,
    LLMPACK_DATA_DIR, read when the index is first used). Nothing is opened or started here:
    the index file is made on first use, the sandbox's workers on the first document."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.index = DocumentIndex(self.path(INDEX_FILE))
        self.sandbox = Sandbox()   # at most two files at a time, each in a worker killed at the deadline
        self.read: LruCache[bytes, Document] = LruCache(READ_KEPT)
        self.clips: LruCache[bytes, np.ndarray] = LruCache(CLIPS_BYTES, weigh=lambda pcm: pcm.nbytes)
        self.rounds = ReadingRounds()   # questions about the whole of a long file under way (core/summaries.py)

    def path(self, name: str) -> Path | None:
        """A file of this app's data folder (None: the per-user one's, decided by the store at each use)."""
        return self.data_dir / name if self.data_dir is not None else None

    def close(self) -> None:
        """Stop the sandbox's idle workers (the app is closing)."""
        self.sandbox.close()


class ReadingRounds:
    """The map rounds under way in one app: which file, how many of its parts are summarised, up
    to which page; and one lock per file, so a second question about it waits and reads the
    summaries the first one wrote. Safe from any request thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, threading.Lock] = {}
        self._rounds: dict[str, dict] = {}

    def lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._files.setdefault(key, threading.Lock())

    def update(self, doc: Indexed, parts: Sequence[Part], done: int) -> None:
        last = parts[done - 1] if done else None
        with self._lock:
            start = self._rounds.get(doc.id, {}).get("started", time.time())
            self._rounds[doc.id] = {
                "file_id": doc.id, "filename": doc.name, "pages": doc.pages, "parts": len(parts), "done": done,
                "page": last.last_page if last else 0, "started": start}

    def finish(self, doc: Indexed) -> None:
        with self._lock:
            self._rounds.pop(doc.id, None)

    def now(self) -> list[dict]:
        """The rounds under way, for the page."""
        with self._lock:
            return [{**r, "seconds": round(time.time() - r["started"], 1)} for r in self._rounds.values()]
