"""One line a person can read while llama.cpp compiles: which part, how far through, how long.

`./dev` builds llama-cpp-python with `pip wheel -v` and pipes everything it prints through this
script, run as `python builder/build_progress.py LOG`: every line goes to LOG whole, and the
console gets the gist. On a terminal that is one line rewritten every couple of seconds,

    [dev] compiling 312/655 (48%) · CPU kernels for haswell: ops.cpp · 9 min 40 s, about 10 min left

and elsewhere (CI, `./dev ... > file`) a plain line every 30 seconds. The build's steps come from
ninja's `[N/M]` counter and the object or library each step makes (CMake's `CMakeFiles/T.dir/`);
a nested build (the Vulkan shader generator is an ExternalProject with its own counter) does not
move the count back. Stdlib only: it runs before llmpack is installed, and `windows/llama_dlls.py`
uses `describe()` for the Windows build's bar.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":   # run as a script, builder/ comes first on the path: its inspect.py would hide the stdlib's
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import re  # noqa: E402 - after the path is set
import shutil  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import BinaryIO, TextIO  # noqa: E402

REFRESH_S = 2.0      # a terminal's line
PLAIN_EVERY_S = 30.0  # a log's lines
_STEP = re.compile(rb"^\s*\[(\d+)/(\d+)\]\s*(.*)")
_OBJECT = re.compile(r"CMakeFiles/([^/\s]+?)\.dir/(?:\S*/)?([^/\s]+?)\.(?:o|obj)\b")
_OUTPUT = re.compile(r"(?:^|\s)-o\s+(\S+)")     # what a compiler or linker command makes
# What pip and CMake print between the compile steps, in the order they come.
_PHASES = ((b"Installing build dependencies", "getting the build tools"),
           (b"Preparing metadata", "reading the package"),
           (b"Building wheel for", "configuring (CMake)"),
           (b"-- Configuring done", "configuring (CMake)"),
           (b"-- Install configuration", "installing into the wheel"),
           (b"Created wheel for", "packing the wheel"))


def part(target: str) -> str:
    """A CMake target in words: which part of llama.cpp it is."""
    t = target.lower()
    if t.startswith(("ggml-cpu-", "ggml_cpu_")) and len(t) > 9:
        return f"CPU kernels for {target[9:]}"
    names = {"ggml-cpu": "CPU kernels", "ggml-vulkan": "Vulkan backend", "vulkan-shaders-gen": "Vulkan shader generator",
             "ggml-base": "ggml core", "ggml": "ggml", "ggml-rpc": "RPC backend", "llama": "llama.cpp",
             "mtmd": "pictures and sound (mtmd)", "ggml-cuda": "CUDA backend", "common": "llama.cpp common"}
    return names.get(t, target)


def describe(rest: str) -> str:
    """What one ninja step works on, from the text after its `[N/M]` (`ninja -v`'s command, or
    its short "Building C object ..." / "Linking ... library ..."): "part: file", or ''."""
    if "vulkan-shaders-gen" in rest and ".comp" in rest or "Generate vulkan shaders" in rest:
        return "Vulkan shaders"
    made = _OUTPUT.search(rest)
    target = made.group(1) if made else rest.rsplit(" ", 1)[-1] if rest.startswith("Linking") else ""
    m = _OBJECT.search(target) or (None if made or rest.startswith("Linking") else _OBJECT.search(rest))
    if m:
        return f"{part(m.group(1))}: {m.group(2)}"
    if target and (made or rest.startswith("Linking")):
        name = target.rsplit("/", 1)[-1]
        return f"linking {re.sub(r'[.](so|dll|a|exe|dylib)([.].*)?$', '', name)}"
    return ""


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


@dataclass
class Progress:
    """The state read so far from the build's output."""
    phase: str = "starting"
    done: int = 0
    total: int = 0
    what: str = ""
    started: float = field(default_factory=time.monotonic)
    compiling_since: float | None = None

    def feed(self, line: bytes) -> None:
        m = _STEP.match(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            if total < self.total:        # a nested build's own counter: not the main count
                return
            if self.compiling_since is None:
                self.compiling_since = time.monotonic()
            self.phase, self.done, self.total = "compiling", done, total
            self.what = describe(m.group(3).decode("utf-8", "replace")) or self.what
            return
        for marker, phase in _PHASES:
            if marker in line:
                self.phase = phase
                return

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = _clock(now - self.started)
        if self.phase != "compiling" or not self.total:
            return f"{self.phase} · {elapsed}"
        text = f"compiling {self.done}/{self.total} ({self.done / self.total:.0%})"
        if self.what:
            text += f" · {self.what}"
        text += f" · {elapsed}"
        if self.compiling_since is not None and self.done >= self.total // 10 and self.done < self.total:
            rate = (now - self.compiling_since) / max(1, self.done)
            text += f", about {max(1, round(rate * (self.total - self.done) / 60))} min left"
        return text


def relay(source: BinaryIO, log: BinaryIO, out: TextIO, *, tty: bool, prefix: str = "[dev] ") -> Progress:
    """Copy `source` to `log` line by line and keep `out` told: one rewritten line on a terminal,
    a plain line every PLAIN_EVERY_S elsewhere. The line is written on a clock, not per line of
    output: one big file (the Vulkan shaders' source) compiles for minutes without a word."""
    state = Progress()
    lock = threading.Lock()

    def read() -> None:
        for raw in iter(source.readline, b""):
            log.write(raw)
            with lock:
                try:
                    state.feed(raw)
                except Exception:  # noqa: BLE001 - a line read wrong must never stop the build it reports on
                    pass
        log.flush()

    reader = threading.Thread(target=read, name="build-output", daemon=True)
    reader.start()
    every = REFRESH_S if tty else PLAIN_EVERY_S
    shown = False
    while True:
        reader.join(every)
        if not reader.is_alive():
            break
        with lock:
            text = prefix + state.line()
        if tty:
            out.write("\r\033[K" + text[: max(20, _columns() - 1)])
        else:
            out.write(text + "\n")
        out.flush()
        shown = True
    if tty and shown:
        out.write("\r\033[K")
        out.flush()
    return state


def _columns() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: COMMAND 2>&1 | python builder/build_progress.py LOG", file=sys.stderr)
        return 2
    out = sys.stderr
    with open(argv[0], "ab") as log:
        relay(sys.stdin.buffer, log, out, tty=out.isatty())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
