"""Text extraction in a child process that is killed at the deadline, under a memory limit.

Why: a thread cannot be stopped. pypdf has no deadline inside one page, so a hostile PDF whose
page never ends kept a pool thread busy for good, and two of them stalled every later
attachment; a file that makes the parser allocate gigabytes took the whole server with it. So
`documents.extract` runs in a worker process:

* the worker is started once and kept warm (a pipe round trip per file, not a process start);
  at most WORKERS files are read at once;
* the parent waits until the deadline plus GRACE_S, then kills the worker and starts a fresh
  one for the next file: one hostile file costs one killed process;
* the worker's memory is capped: setrlimit(RLIMIT_AS) on POSIX, a job object with a process
  memory limit on Windows, and there the parent also watches the worker's committed memory
  while it reads and kills it past the cap (Wine accepts the job's limit but does not enforce
  it: winjob.py); a MemoryError ends that worker, the file is refused, and the next one gets a
  fresh worker. LLMPACK_EXTRACT_MEMORY_MB sets the cap (default MEMORY_BYTES);
* the answer comes back as JSON, never pickle: a worker that a hostile file took over still
  cannot make the server run code.

The worker is `python -c` (or the built program with WORKER_FLAG, see builder/stub_entry.py),
so it imports only the documents module, not the server or llama.cpp.
"""
from __future__ import annotations

import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from llmpack.errors import LlmpackError
from llmpack.runtime.server.documents import extract as D

if os.name == "nt":
    from llmpack.runtime.server.documents import winjob

MEMORY_BYTES = 1 << 30      # address space of one worker (a 32 MB PDF needs a few hundred MB)
MEMORY_ENV = "LLMPACK_EXTRACT_MEMORY_MB"   # another cap, in MiB
WORKERS = 2
GRACE_S = 1.0               # after the deadline, before the kill: the worker's own check words it better
POLL_S = 0.05               # Windows: how often the parent looks at a reading worker's memory
WORKER_FLAG = "--llmpack-extract-worker"
_HEADER = struct.Struct(">II")   # JSON length, payload length


def _send(f: BinaryIO, head: dict, payload: bytes = b"") -> None:
    body = json.dumps(head, ensure_ascii=False).encode("utf-8", "surrogatepass")
    f.write(_HEADER.pack(len(body), len(payload)) + body + payload)
    f.flush()


def _receive(f: BinaryIO) -> tuple[dict, bytes]:
    raw = f.read(_HEADER.size)
    if len(raw) < _HEADER.size:
        raise EOFError
    n_head, n_payload = _HEADER.unpack(raw)
    head, payload = f.read(n_head), f.read(n_payload)
    if len(head) < n_head or len(payload) < n_payload:
        raise EOFError
    return json.loads(head.decode("utf-8", "surrogatepass")), payload


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


# ---------------------------------------------------------------- the worker side
def worker_main(memory: int = MEMORY_BYTES) -> None:
    """Serve extraction requests on stdin/stdout until stdin closes (the child's whole life)."""
    out = os.fdopen(os.dup(1), "wb")
    inp = os.fdopen(os.dup(0), "rb")
    try:
        os.dup2(2, 1)        # a stray print() goes to stderr, never into the answers
    except OSError:          # no stderr (a Windows program without a console)
        os.close(1)
    if os.name != "nt" and memory:
        import resource   # lazy: POSIX only

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    while True:
        try:
            head, data = _receive(inp)
            doc = D.extract(head["name"], data, media_type=head["media_type"],
                            deadline=time.monotonic() + head["time_limit"])
            _send(out, {"doc": {"name": doc.name, "kind": doc.kind, "text": doc.text, "size": doc.size,
                                "pages": doc.pages, "headings": doc.headings}})
        except EOFError:
            return
        except D.DocumentError as exc:
            _send(out, {"error": str(exc)})
        except MemoryError:
            _send(out, {"memory": True})
            return           # its heap may be in pieces: the parent starts a fresh worker


# ---------------------------------------------------------------- the server side
class _Worker:
    def __init__(self, memory: int) -> None:
        if getattr(sys, "frozen", False):
            argv = [sys.executable, WORKER_FLAG, str(memory)]
        else:
            argv = [sys.executable, "-c", f"import sys, {__name__} as m; m.worker_main(int(sys.argv[1]))", str(memory)]
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, creationflags=flags)
        self.memory = memory
        self.job = winjob.limit_memory(self.proc, memory) if os.name == "nt" else None
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, name="llmpack-extract-reader", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                self.answers.put(_receive(self.proc.stdout)[0])
        except (EOFError, OSError, ValueError):
            self.answers.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def over_memory(self) -> bool:
        """Windows: past the cap (the job object may not enforce it: Wine); POSIX: setrlimit does."""
        return os.name == "nt" and winjob.committed(self.proc) > self.memory

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.job:
            winjob.close(self.job)
            self.job = None
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class Sandbox:
    """Up to `workers` warm worker processes; `extract` borrows one per file."""

    def __init__(self, workers: int = WORKERS, memory: int | None = None) -> None:
        self.memory = memory or memory_limit()
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(workers):
            self._idle.put(None)
        self.started = 0          # workers started so far (a killed one is replaced)

    def extract(self, name: str, data: bytes, *, media_type: str = "", time_limit: float = D.TIME_LIMIT_S) -> D.Document:
        """documents.extract in a worker; DocumentError for the file, its time or its memory."""
        deadline = time.monotonic() + time_limit
        try:
            worker = self._idle.get(timeout=time_limit)
        except queue.Empty:
            raise _slow(name) from None
        try:
            if worker is None or not worker.alive():
                worker = _Worker(self.memory)
                self.started += 1
            answer = self._ask(worker, name, data, media_type, deadline)
            if answer is None or answer.get("memory"):
                worker.kill()
                worker = None
        except BaseException:
            if worker is not None:
                worker.kill()
            worker = None
            raise
        finally:
            self._idle.put(worker)
        if answer is None or answer.get("memory"):
            raise D.DocumentError(f"{name} needs more memory to read than llmpack allows ({D._mb(self.memory)}); "
                                  "attach a smaller file or copy its text in")
        if "error" in answer:
            raise D.DocumentError(answer["error"])
        doc = answer["doc"]   # JSON made the headings' tuples lists
        return D.Document(**{**doc, "headings": [tuple(h) for h in doc.get("headings", [])]})

    def _ask(self, worker: _Worker, name: str, data: bytes, media_type: str, deadline: float) -> dict | None:
        left = deadline - time.monotonic()
        try:
            _send(worker.proc.stdin, {"name": name, "media_type": media_type, "time_limit": max(left, 0.0)}, data)
        except OSError:
            return None
        end, step = deadline + GRACE_S, (POLL_S if os.name == "nt" else float("inf"))
        while True:
            try:
                return worker.answers.get(timeout=max(min(step, end - time.monotonic()), 0.0))
            except queue.Empty:
                pass
            if worker.over_memory():
                worker.kill()
                return None        # refused as too big for the memory cap
            if time.monotonic() >= end:
                worker.kill()
                raise _slow(name) from None

    def close(self) -> None:
        """Kill the idle workers (a busy one is killed by its own deadline)."""
        while not self._idle.empty():
            worker = self._idle.get_nowait()
            if worker is not None:
                worker.kill()


def _slow(name: str) -> D.DocumentError:
    return D.DocumentError(f"reading {name} took longer than {D.TIME_LIMIT_S:.0f} s, so llmpack gave up; "
                           "attach a smaller file or copy its text in")
