"""Keeping glibc's heap from holding what requests freed: large blocks mapped on their own, two
arenas, and the free pages given back to the OS after the model loads and whenever the server has
grown since the last time.

glibc keeps memory that was freed for reuse, and it counts as the server's resident memory: the
GGUF header parse and the tokenizer's tables at load, and later the requests' bodies, their JSON
and their tokens, freed in each of the arenas of waitress's many threads. A server that answered a
burst of long requests (100,000-character chats, /tokenize) then held their memory while idle,
about 2 MB per 1,000 such requests (issue 46). `malloc_trim(0)` returns the free pages of every
arena, not only the top of the main heap, but it cannot return a page that still holds one live
block, and glibc's defaults scatter them:
- the threshold above which a block gets a mapping of its own starts at 128 KiB but rises, up to
  32 MiB, each time such a block is freed; after the first long request, 100,000-character
  strings and token lists were carved out of the arenas between small long-lived blocks;
- each thread that allocates may get an arena of its own, up to 8 per core.
Measured in one process after 3,000 /tokenize and 3,000 generation requests of the fuzz: glibc's
defaults left 101 MB free inside the arenas and resident memory 43 % over its start, untrimmable;
a fixed 128 KiB threshold, two arenas and the keeper's trims held it to +9 % after 12,000 of
every kind (docs/BENCHMARKS.md, 'Memory after a fuzz'). Windows' heap and macOS's return memory
by themselves, and musl has neither knob: there this is a no-op."""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from pathlib import Path

# How often the keeper looks at the resident size, and by how much it must have grown since the
# last trim before it trims again. A trim walks every arena's free lists under their locks (a few
# ms for a few hundred MB): rare enough not to show in any request's latency.
CHECK_S = 2.0
GROWTH_KIB = 4096
# glibc's mallopt parameters (malloc.h) and the values set: blocks from 128 KiB up get their own
# mapping, returned on free (fixing the threshold also stops it rising); two arenas: Python's
# threads allocate under the GIL, so more bought fragmentation, not speed, and the second keeps
# llama.cpp's calls (which run with the GIL released) from waiting on Python's.
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 128 * 1024
M_ARENA_MAX, ARENA_MAX = -8, 2


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, where it is glibc (looked up once: the keeper asks at every trim)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim, libc.mallopt   # noqa: B018 - both or neither (musl has neither)
    except (OSError, AttributeError):   # not glibc
        return None
    return libc


def tune() -> bool:
    """Set the mapping threshold and the arena count (above); True where glibc took both. Call it
    before serving: blocks allocated earlier keep where they are."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))


def resident_kib() -> int:
    """This process's resident memory in KiB (Linux), else 0."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


def give_back_freed_heap() -> None:
    """Return the heap's free pages to the OS now (a no-op where the C library has no malloc_trim)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


class HeapKeeper:
    """A daemon thread that trims the heap when the process has grown by GROWTH_KIB since the last
    trim. Owned by the Server; `stop()` ends it."""

    def __init__(self, check_s: float = CHECK_S, growth_kib: int = GROWTH_KIB) -> None:
        self.check_s, self.growth_kib = check_s, growth_kib
        self.trims = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if _glibc() is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="llmpack-heap", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        give_back_freed_heap()
        self.trims += 1
        floor = resident_kib()
        while not self._stop.wait(self.check_s):
            now = resident_kib()
            if now > floor + self.growth_kib:
                give_back_freed_heap()
                self.trims += 1
                floor = resident_kib()
            else:
                floor = min(floor, now)
