"""Running PyInstaller for a stub build: its output kept in a log file while a progress bar shows
its latest step, and the log's tail for an error message. Split from stub.py, which decides what
to build and where it is cached."""
from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from llmpack.progress import Bar


def tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


@contextlib.contextmanager
def watched(proc: subprocess.Popen, bar: Bar) -> Iterator[None]:
    """While a long build step runs under a progress bar: an error or Ctrl+C kills the process
    (never left compiling behind the person's back), and the bar is closed either way."""
    try:
        yield
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        bar.close()


def run_with_status(cmd: list[str], log_path: Path, env: dict, cwd: Path, *, quiet: bool, label: str) -> int:
    """Run PyInstaller with its log in a file; meanwhile a progress bar shows its latest step.
    Its output goes through a pipe, not straight into the file: Windows Python under Wine cannot
    start with a file as its standard output ("init_sys_streams: Invalid handle")."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd)
        copier = threading.Thread(target=_copy_stream, args=(proc.stdout, log), daemon=True)
        copier.start()
        bar = Bar(f"{label}; log: {log_path}", enabled=not quiet)
        with watched(proc, bar):
            while proc.poll() is None:
                time.sleep(0.2)
                bar.set_note(_last_step(log_path))
        copier.join(timeout=10)   # wineserver may hold the pipe open for a few seconds more
    return proc.returncode


def _copy_stream(src: Any, dst: Any) -> None:
    for chunk in iter(lambda: src.read1(1 << 16), b""):
        dst.write(chunk)
        dst.flush()


def _last_step(log_path: Path) -> str:
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if " INFO: " in line:
            return line.split(" INFO: ", 1)[1].strip()
    return lines[-1].strip() if lines else ""
