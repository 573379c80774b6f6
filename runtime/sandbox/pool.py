"""Work on a stranger's bytes in warm child processes, killed at a deadline, under a memory limit.

Why: a thread cannot be stopped, and a parser or decoder that a hostile file drives into an
endless loop or a huge allocation would take the server with it. So a job that reads untrusted
bytes (a document's text, a picture's pixels, later a sound's samples) runs in a worker process:

* a worker is started on first use and kept warm (a pipe round trip per job, not a process start);
  at most `workers` jobs of one pool run at once: the pool's slots are a semaphore, so a burst of
  pictures waits its turn instead of decoding forty at once;
* the parent waits until the deadline plus GRACE_S, then kills the worker and starts a fresh
  one for the next job: one hostile file costs one killed process;
* the worker's memory is capped: setrlimit(RLIMIT_AS) on POSIX, a job object with a process
  memory limit on Windows, and there the parent also watches the worker's committed memory
  while it works and kills it past the cap (Wine accepts the job's limit but does not enforce
  it: winjob.py); a MemoryError ends that worker, the job is refused, and the next one gets a
  fresh worker;
* a worker that dies is told apart by how it died (`_death`): past the memory cap (a MemoryError,
  a C++ reader's abort, the kernel's OOM kill) or of a fault in the reader's own code (a crash
  signal, or a Python exception the job did not expect), which a damaged file causes, so the
  person hears "it may be damaged", not "it needs more memory";
* a job is a function `job(head: dict, data: bytes) -> (dict, bytes)` named "module:function"; the
  answer comes back as JSON and raw bytes (pixels, samples), never pickle, and no larger than the
  pool's `max_answer`: a worker that a hostile file took over still cannot make the server run
  code or allocate what it likes. A job refuses its input by raising LlmpackError; the sentence
  comes back as `Refused`.

The worker is `python -c` (or the built program with WORKER_FLAG, see builder/stub_entry.py),
so it imports only the job's module, not the server or llama.cpp.
"""
from __future__ import annotations

import importlib
import json
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import BinaryIO, Callable

from llmpack.errors import LlmpackError

if os.name == "nt":
    from llmpack.runtime.sandbox import winjob

GRACE_S = 1.0               # after the deadline, before the kill: the worker's own check words it better
POLL_S = 0.05               # Windows: how often the parent looks at a busy worker's memory
WORKER_FLAG = "--llmpack-extract-worker"   # a built program run as a worker: FLAG JOB MEMORY
_HEADER = struct.Struct(">II")   # JSON length, payload length
MAX_HEAD = 64 << 20              # the JSON half of an answer (a long document's text)

Job = Callable[[dict, bytes], "tuple[dict, bytes]"]


class SandboxError(LlmpackError):
    """A job did not come back with an answer; the subclass says why."""


class Refused(SandboxError):
    """The job looked at the input and refused it; the message is the job's own sentence."""


class TooSlow(SandboxError):
    """The job ran past its deadline and its worker was killed."""


class OutOfMemory(SandboxError):
    """The job needed more memory than the worker may have (or its answer was too big)."""


class Crashed(SandboxError):
    """The worker died of a fault in the job's code (a crash signal, an unexpected exception), not of
    the memory cap: the input drove a parser into a state it does not handle."""


class Busy(SandboxError):
    """Every worker stayed busy until the deadline, so the job never started."""


def _send(f: BinaryIO, head: dict, payload: bytes = b"") -> None:
    body = json.dumps(head, ensure_ascii=False).encode("utf-8", "surrogatepass")
    f.write(_HEADER.pack(len(body), len(payload)) + body)
    f.write(payload)
    f.flush()


def _receive(f: BinaryIO, max_payload: int = 1 << 40) -> tuple[dict, bytes]:
    raw = f.read(_HEADER.size)
    if len(raw) < _HEADER.size:
        raise EOFError
    n_head, n_payload = _HEADER.unpack(raw)
    if n_head > MAX_HEAD or n_payload > max_payload:
        raise ValueError(f"an answer of {n_head} + {n_payload} bytes is larger than allowed")
    head, payload = f.read(n_head), f.read(n_payload)
    if len(head) < n_head or len(payload) < n_payload:
        raise EOFError
    return json.loads(head.decode("utf-8", "surrogatepass")), payload


def _resolve(job: str) -> Job:
    module, _, name = job.partition(":")
    return getattr(importlib.import_module(module), name)


# ---------------------------------------------------------------- the worker side
def worker_main(job: str, memory: int) -> None:
    """Serve `job` on stdin/stdout until stdin closes (the child's whole life)."""
    # Ctrl+C in a terminal reaches every process of the program's group: the server shuts down
    # and ends its workers, and a worker must not print a traceback under "llmpack: stopped".
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    inp = os.fdopen(os.dup(0), "rb")
    try:
        os.dup2(2, 1)        # a stray print() goes to stderr, never into the answers
    except OSError:          # no stderr (a Windows program without a console)
        os.close(1)
    fn = _resolve(job)       # imported before the cap: the cap is for the input, not for our own code
    if os.name != "nt" and memory:
        import resource   # lazy: POSIX only

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    while True:
        try:
            head, data = _receive(inp)
            answer, payload = fn(head, data)
            _send(out, {"ok": answer}, payload)
        except EOFError:
            return
        except LlmpackError as exc:
            _send(out, {"error": str(exc)})
        except MemoryError:
            _send(out, {"memory": True})
            return           # its heap may be in pieces: the parent starts a fresh worker
        except Exception:    # noqa: BLE001 - a reader's surprise: said as such, and the worker is not trusted again
            if sys.stderr is not None:     # the server's console, for a bug report (a windowed program has none)
                traceback.print_exc()
            _send(out, {"crashed": True})
            return


# How a worker that died without an answer died (`_death`). One that ran into the memory cap fails
# an allocation: Python raises MemoryError (answered above), C++ code aborts (PDFium at the cap:
# SIGABRT, measured with a PDF that unpacks to 400 MB under a 256 MB cap), the kernel's OOM killer
# sends SIGKILL. A fault is the reader choking on the file: these signals on POSIX (SIGTRAP and
# SIGILL: how Chromium's CHECK, which PDFium uses, stops a process), and on Windows the exception
# codes of an access violation, an illegal instruction, a breakpoint, a division by zero and a
# stack overflow.
_FAULT_SIGNALS = {getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGTRAP") if hasattr(signal, n)}
_FAULT_CODES_NT = {0xC0000005, 0xC000001D, 0x80000003, 0xC0000094, 0xC00000FD}


def _death(returncode: int | None) -> SandboxError:
    """Crashed for a worker that a fault ended, OutOfMemory otherwise (alive: its answer was too big)."""
    if returncode is not None and (-returncode in _FAULT_SIGNALS if os.name != "nt"
                                   else (returncode & 0xFFFFFFFF) in _FAULT_CODES_NT):
        return Crashed("the job's reader failed on the input")
    return OutOfMemory("the job needed more memory than allowed")


# ---------------------------------------------------------------- the server side
class _Worker:
    def __init__(self, job: str, memory: int, max_answer: int) -> None:
        if getattr(sys, "frozen", False):
            argv = [sys.executable, WORKER_FLAG, job, str(memory)]
        else:
            argv = [sys.executable, "-c", f"import sys, {__name__} as m; m.worker_main(sys.argv[1], int(sys.argv[2]))",
                    job, str(memory)]
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, creationflags=flags)
        self.memory = memory
        self.max_answer = max_answer
        self.job = winjob.limit_memory(self.proc, memory) if os.name == "nt" else None
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, name="llmpack-sandbox-reader", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                self.answers.put(_receive(self.proc.stdout, self.max_answer))
        except (EOFError, OSError, ValueError):
            self.answers.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def died(self) -> SandboxError:
        """Why this worker stopped answering (`_death` of its exit status; its pipe is closed)."""
        try:
            code = self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        return _death(code)

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


class Pool:
    """Up to `workers` warm worker processes running `job` ("module:function"); `run` borrows one."""

    def __init__(self, job: str, *, workers: int, memory: int, max_answer: int) -> None:
        self.job, self.memory, self.max_answer = job, memory, max_answer
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()   # the slots: a semaphore of `workers`
        for _ in range(workers):
            self._idle.put(None)
        self._lock = threading.Lock()
        self.started = 0          # workers started so far (a killed one is replaced)
        self.busy = 0             # jobs running now
        self.peak_busy = 0        # the most that ever ran at once (never more than `workers`)

    def run(self, head: dict, data: bytes, *, time_limit: float) -> tuple[dict, bytes]:
        """The job's answer for (head, data), or a SandboxError that says why there is none.
        `head` gains "time_limit": the seconds left, for a job that checks its own deadline."""
        deadline = time.monotonic() + time_limit
        try:
            worker = self._idle.get(timeout=time_limit)
        except queue.Empty:
            raise Busy("every worker stayed busy") from None
        with self._lock:
            self.busy += 1
            self.peak_busy = max(self.peak_busy, self.busy)
        try:
            if worker is None or not worker.alive():
                worker = _Worker(self.job, self.memory, self.max_answer)
                with self._lock:
                    self.started += 1
            answer = self._ask(worker, head, data, deadline)
            if answer[0].get("memory") or answer[0].get("crashed"):
                worker.kill()
                worker = None
        except BaseException:
            if worker is not None:
                worker.kill()
            worker = None
            raise
        finally:
            with self._lock:
                self.busy -= 1
            self._idle.put(worker)
        if answer[0].get("memory"):
            raise OutOfMemory("the job needed more memory than allowed")
        if answer[0].get("crashed"):
            raise Crashed("the job's reader failed on the input")
        if "error" in answer[0]:
            raise Refused(answer[0]["error"])
        return answer[0]["ok"], answer[1]

    def _ask(self, worker: _Worker, head: dict, data: bytes, deadline: float) -> tuple[dict, bytes]:
        """The worker's answer, or the SandboxError that says why none came."""
        left = deadline - time.monotonic()
        try:
            _send(worker.proc.stdin, {**head, "time_limit": max(left, 0.0)}, data)
        except OSError:
            raise worker.died() from None
        end, step = deadline + GRACE_S, (POLL_S if os.name == "nt" else float("inf"))
        while True:
            try:
                answer = worker.answers.get(timeout=max(min(step, end - time.monotonic()), 0.0))
            except queue.Empty:
                pass
            else:
                if answer is None:     # its pipe closed (it died), or its answer was larger than allowed
                    raise worker.died()
                return answer
            if worker.over_memory():
                worker.kill()
                raise OutOfMemory("the job needed more memory than allowed")
            if time.monotonic() >= end:
                worker.kill()
                raise TooSlow("the job ran past its deadline") from None

    def pids(self) -> list[int]:
        """The idle workers' process ids (tests measure their memory)."""
        return [w.proc.pid for w in list(self._idle.queue) if w is not None and w.alive()]

    def close(self) -> None:
        """Kill the idle workers (a busy one is killed by its own deadline)."""
        while not self._idle.empty():
            worker = self._idle.get_nowait()
            if worker is not None:
                worker.kill()
