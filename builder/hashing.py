"""sha256 of models and stubs: hashed while copying, and remembered per file identity.

Every model is identified by its sha256 (the manifest records it; extraction verifies it), so
packing and unpacking hash every byte they move. Hashing runs on a helper thread and overlaps
the reads and writes (hashlib releases the GIL). A small digest cache (``cache_dir()/digests.json``)
remembers the sha256 of files already hashed, keyed by device, inode, size, mtime and ctime:
rebuilding from the same model skips re-reading it. Any write changes ctime, which no user can
set back, so a changed file never matches a stale entry.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Callable

from llmpack.builder.fileio import replace_text
from llmpack.builder.packfile import PackError
from llmpack.progress import ByteProgress, ProgressArg

CHUNK = 16 * 1024 * 1024
DIGEST_CACHE_ENTRIES = 256


class Hasher:
    """sha256 on a helper thread: `update(buf)` returns at once; `hexdigest()` waits for it."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self._pool = ThreadPoolExecutor(1)
        self._prev: Future | None = None

    def update(self, buf: bytes) -> None:
        fut = self._pool.submit(self._h.update, buf)
        if self._prev is not None:
            self._prev.result()
        self._prev = fut

    def hexdigest(self) -> str:
        if self._prev is not None:
            self._prev.result()
        self._pool.shutdown()
        return self._h.hexdigest()


def read_exact(f: BinaryIO, n: int) -> bytes:
    buf = f.read(n)
    while len(buf) < n:
        more = f.read(n - len(buf))
        if not more:
            raise PackError(f"{getattr(f, 'name', 'a file')} ended early (was it changed while packing?)")
        buf += more
    return buf


def copy_hashing(src: BinaryIO, offset: int, length: int, write: Callable[[bytes], object] | None,
                 bar: Callable[[int], None]) -> str:
    """Stream `length` bytes of `src` from `offset` to `write` (or nowhere), returning their sha256."""
    src.seek(offset)
    hasher, left = Hasher(), length
    while left:
        buf = read_exact(src, min(CHUNK, left))
        hasher.update(buf)
        if write is not None:
            write(buf)
        left -= len(buf)
        bar(len(buf))
    return hasher.hexdigest()


def hash_path(path: Path, size: int, progress: ProgressArg) -> str:
    """sha256 of the first `size` bytes of `path`, shown as "verifying model"."""
    bar = ByteProgress(progress, size, "verifying model")
    try:
        with open(path, "rb", buffering=0) as f:
            return copy_hashing(f, 0, size, None, bar)
    finally:
        bar.close()


def hash_file(f: BinaryIO) -> str:
    """sha256 of a whole open file, from the digest cache when it has seen this file before."""
    sha = known_digest(f)
    if sha is None:
        sha = copy_hashing(f, 0, os.fstat(f.fileno()).st_size, None, lambda n: None)
        remember_digest(f, sha)
    return sha


def _digest_key(f: BinaryIO) -> str:
    st = os.fstat(f.fileno())
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _digest_file() -> Path:
    from llmpack.paths import cache_dir

    return cache_dir() / "digests.json"


def known_digest(f: BinaryIO) -> str | None:
    """The remembered sha256 of this very file (same identity, size and times), or None."""
    try:
        return json.loads(_digest_file().read_text()).get(_digest_key(f))
    except (OSError, ValueError, AttributeError):
        return None


def remember_digest(f: BinaryIO, sha: str) -> None:
    path = _digest_file()
    try:
        known = json.loads(path.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    known = dict(list(known.items())[-(DIGEST_CACHE_ENTRIES - 1):])   # keep the newest entries
    known[_digest_key(f)] = sha
    try:
        replace_text(path, json.dumps(known))
    except OSError:   # a cache: never worth failing a build over
        pass
