"""sha256 of models and stubs: hashed while copying, and remembered per file identity.

Every model is identified by its sha256 (the manifest records it; extraction verifies it), so
packing and unpacking hash every byte they move. Hashing runs on a helper thread and overlaps
the reads and writes (hashlib releases the GIL). A small digest cache (``cache_dir()/digests.json``)
remembers the sha256 of files already hashed, so rebuilding from the same model skips re-reading it.

An entry is keyed by the file's identity: device, inode (the file ID on Windows), size and mtime,
plus ctime on POSIX, where it is the change time that every write moves and no user can set back.
On Windows st_ctime is the *creation* time, which a rewrite in place leaves alone, so it is not
trusted there. And when the identity is in doubt, the file is simply hashed again next time:
- no file ID (st_ino 0: FAT, exFAT, some network shares), so two files could share a key;
- an mtime within MTIME_SLACK_NS of the moment hashing began: a write in the same timestamp tick
  (2 s on FAT) would not move it (git's "racy" files);
- a file whose identity changed between the start and the end of hashing.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Callable

from llmpack.builder.fileio import replace_text
from llmpack.builder.packfile import PackError
from llmpack.paths import cache_dir
from llmpack.progress import ByteProgress, ProgressArg

CHUNK = 16 * 1024 * 1024
DIGEST_CACHE_ENTRIES = 256
MTIME_SLACK_NS = 2_000_000_000   # FAT's mtime resolution; NTFS and POSIX file systems are finer
# file -> (its identity, time.time_ns()) when known_digest looked at it, before hashing it
_seen: "weakref.WeakKeyDictionary[BinaryIO, tuple[str | None, int]]" = weakref.WeakKeyDictionary()


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


def digest_key(st: os.stat_result, windows: bool = os.name == "nt") -> str | None:
    """The cache key of a file with this stat, or None when its identity is in doubt (no file ID)."""
    if not st.st_ino:
        return None
    key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    return key if windows else f"{key}:{st.st_ctime_ns}"


def _identity(f: BinaryIO) -> str | None:
    return digest_key(os.fstat(f.fileno()))


def _digest_file() -> Path:
    return cache_dir() / "digests.json"


def known_digest(f: BinaryIO) -> str | None:
    """The remembered sha256 of this very file (same identity, size and times), or None. Also
    notes the file's identity now, before the caller hashes it, for remember_digest to compare."""
    key = _identity(f)
    try:
        _seen[f] = (key, time.time_ns())
    except TypeError:   # not weak-referenceable: remember_digest will not trust it
        pass
    if key is None:
        return None
    try:
        return json.loads(_digest_file().read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def remember_digest(f: BinaryIO, sha: str) -> None:
    """Remember `sha` for this file, unless its identity is in doubt (module docstring): then the
    next build hashes it again, which costs time but never a wrong digest."""
    key, (before, started) = _identity(f), _seen.pop(f, (None, 0))
    st = os.fstat(f.fileno())
    if key is None or key != before or st.st_mtime_ns >= started - MTIME_SLACK_NS:
        return
    path = _digest_file()
    try:
        known = json.loads(path.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    known = dict(list(known.items())[-(DIGEST_CACHE_ENTRIES - 1):])   # keep the newest entries
    known[key] = sha
    try:
        replace_text(path, json.dumps(known))
    except OSError:   # a cache: never worth failing a build over
        pass
