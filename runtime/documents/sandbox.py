"""Text extraction in a child process that is killed at the deadline, under a memory limit.

Why: a thread cannot be stopped. A PDF reader has no deadline inside one page, so a hostile PDF
whose page never ends kept a pool thread busy for good, and two of them stalled every later
attachment; a file that makes the parser allocate gigabytes took the whole server with it. So
`documents.extract` runs as a job of the sandbox's worker pool (runtime/sandbox/pool.py: warm
workers, at most WORKERS files at once, a kill at the deadline plus GRACE_S, a memory cap):
one hostile file costs one killed process. LLMPACK_EXTRACT_MEMORY_MB sets the cap (default
MEMORY_BYTES). The worker imports only this module and `extract`, not the server or llama.cpp.
"""
from __future__ import annotations

import os
import time

from llmpack.errors import LlmpackError
from llmpack.runtime.sandbox import pool as P
from llmpack.runtime.sandbox.ladder import Ladder
from llmpack.runtime.sandbox.pool import GRACE_S, WORKER_FLAG  # noqa: F401 - the tests and the stub name them here
from llmpack.runtime.documents import extract as D

MEMORY_BYTES = 1 << 30      # address space of one worker (a 32 MB PDF needs a few hundred MB)
MEMORY_ENV = "LLMPACK_EXTRACT_MEMORY_MB"   # another cap, in MiB
WORKERS = 2
MAX_ANSWER = 256 << 20      # a document's text comes back in the JSON half; no raw bytes
LADDER = Ladder(D.DocumentError, busy_error=D.DocumentError, slow=D.SLOW, busy=D.SLOW,   # busy: as slow, to a reader
                memory="{name} needs more memory to read than llmpack allows ({mb}); "
                       "attach a smaller file or copy its text in",
                crash="{name} could not be read: llmpack's reader failed on it, so the file may be damaged; "
                      "save it again (or print it to PDF), or copy its text in")


def memory_limit() -> int:
    """The cap on one worker's memory: $LLMPACK_EXTRACT_MEMORY_MB MiB, else MEMORY_BYTES. A value
    that is not a whole number of at least 32 MiB is refused with one line at start-up."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return MEMORY_BYTES
    if not raw.isdigit() or int(raw) < 32:
        raise LlmpackError(f"{MEMORY_ENV}={raw!r}: give the memory one attachment reader may use, in MiB "
                           f"(at least 32; default {MEMORY_BYTES >> 20})")
    return int(raw) << 20


def extract_job(head: dict, data: bytes) -> tuple[dict, bytes]:
    """The worker's side: one file to its text (DocumentError, a LlmpackError, refuses it)."""
    doc = D.extract(head["name"], data, media_type=head["media_type"],
                    deadline=time.monotonic() + head["time_limit"])
    return {"name": doc.name, "kind": doc.kind, "text": doc.text, "size": doc.size, "pages": doc.pages,
            "headings": doc.headings}, b""


class Sandbox:
    """Up to `workers` warm worker processes; `extract` borrows one per file."""

    def __init__(self, workers: int = WORKERS, memory: int | None = None) -> None:
        self.memory = memory or memory_limit()
        self._pool = P.Pool(f"{__name__}:extract_job", workers=workers, memory=self.memory, max_answer=MAX_ANSWER)

    @property
    def started(self) -> int:
        """Workers started so far (a killed one is replaced)."""
        return self._pool.started

    def extract(self, name: str, data: bytes, *, media_type: str = "", time_limit: float | None = None) -> D.Document:
        """documents.extract in a worker, within `time_limit` seconds (by default D.time_limit of
        its size); DocumentError for the file, its time or its memory."""
        limit = D.time_limit(len(data)) if time_limit is None else time_limit
        answer, _ = LADDER.run(self._pool, {"name": name, "media_type": media_type}, data, time_limit=limit,
                               name=name, mb=D._mb(self.memory), seconds=f"{limit:.0f}")
        return _document(name, answer)

    def close(self) -> None:
        """Kill the idle workers (a busy one is killed by its own deadline)."""
        self._pool.close()


def _document(name: str, answer: dict) -> D.Document:
    """The worker's answer as a Document, checked again here: the worker reads hostile files, so
    what it says is held to the same bounds (MAX_TEXT_CHARS, MAX_PAGES) as if this process had
    read the file, and an answer of the wrong shape is refused like an unreadable file."""
    try:
        text, pages = answer["text"], answer.get("pages", [])
        # JSON made the headings' tuples lists
        doc = D.Document(name=str(answer["name"]), kind=str(answer["kind"]), text=text, size=int(answer["size"]),
                         pages=pages, headings=[(int(a), int(b), str(c)) for a, b, c in answer.get("headings", [])])
        shaped = isinstance(text, str) and isinstance(pages, list) and all(isinstance(p, str) for p in pages)
    except (AttributeError, KeyError, TypeError, ValueError):
        shaped = False
    if not shaped:
        raise D.DocumentError(f"{name} could not be read (its reader gave an answer llmpack cannot use); "
                              "save it again, or copy its text in")
    if len(text) > D.MAX_TEXT_CHARS or sum(map(len, pages)) > D.MAX_TEXT_CHARS:
        raise D._too_long(name, len(text))
    if len(pages) > D.MAX_PAGES:
        raise D.DocumentError(f"{name} has {len(pages):,} pages; llmpack reads at most {D.MAX_PAGES:,}: "
                              "attach a part of it")
    return doc

