"""Console progress: one mechanism for packing a model (`llmpack build`), building the runtime
stub, unpacking a model on first launch and loading it.

On a terminal every phase is a tqdm bar on stderr that redraws in place. Anywhere else (a log
file, a pipe, CI, a test reading stderr) a bar that redraws with carriage returns is noise, so
a phase is one line when it starts and another at most every ``NOTE_EVERY_S`` seconds.

Code that does the work reports to a :data:`ProgressArg`: ``True`` (show a bar), a callable
``(done, total)`` (e.g. the server, which shows progress on the chat page), or ``None``.

:func:`human_bytes` is how every message shows a size (inspect's memory figures, a build's
report, a full disk), in the binary units tqdm's byte bars and llama.cpp's logs use.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO, Union

ProgressArg = Union[bool, Callable[[int, int], None], None]
NOTE_EVERY_S = 30.0


class Bar:
    """One phase of work on the console: `update(n)` / `set_fraction(f)`, then `close()`.

    total=None: a phase of unknown length (elapsed time and `set_note` text only).
    """

    def __init__(self, desc: str, total: float | None = None, *, unit: str = "B", enabled: bool = True,
                 file: TextIO | None = None) -> None:
        self.desc, self.total, self.done, self.note = desc, total, 0.0, ""
        self.file = file or sys.stderr
        self.enabled = enabled
        self._tqdm = None
        self._last_note = time.monotonic()
        self._started = self._last_note
        if not enabled:
            return
        if _isatty(self.file):
            from tqdm import tqdm   # lazy: a bar on a terminal only; logs and pipes never import it

            if total is None:        # unknown length: elapsed time and the latest step
                fmt = "{desc}: {elapsed}{postfix}"
            elif unit == "B":        # bytes: tqdm's default, scaled to KiB/MiB/GiB
                fmt = None
            else:                    # a fraction: percentage and elapsed time only
                fmt = "{l_bar}{bar}| {elapsed}"
            self._tqdm = tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                              file=self.file, leave=False, dynamic_ncols=True, bar_format=fmt)
        else:
            self._line(f"llmpack: {desc}...")

    def update(self, n: float) -> None:
        self.done += n
        if self._tqdm is not None:
            self._tqdm.update(n)
        elif self.enabled:
            self._maybe_note()

    def set_fraction(self, fraction: float) -> None:
        """For a bar made with total=1.0 (or any total): jump to `fraction` of it."""
        target = max(0.0, min(1.0, fraction)) * (self.total or 1.0)
        if target > self.done:
            self.update(target - self.done)

    def set_note(self, text: str) -> None:
        """Latest step of a phase of unknown length (e.g. PyInstaller's current step)."""
        self.note = text
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(text[:80], refresh=True)
        elif self.enabled:
            self._maybe_note()

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
        self.enabled = False

    def _maybe_note(self) -> None:
        now = time.monotonic()
        if now - self._last_note < NOTE_EVERY_S:
            return
        self._last_note = now
        if self.total:
            where = f"{min(1.0, self.done / self.total):.0%}"
        else:
            where = self.note or "working"
        self._line(f"llmpack: {self.desc}: {where} ({now - self._started:.0f} s)")

    def _line(self, text: str) -> None:
        self.file.write(text + "\n")
        self.file.flush()


class ByteProgress:
    """The :data:`ProgressArg` of a byte-copying job, called with the bytes done since last time."""

    def __init__(self, progress: ProgressArg, total: int, desc: str) -> None:
        self.total, self.done = total, 0
        self.bar = Bar(desc, total) if progress is True else None
        self.callback = progress if callable(progress) else None

    def __call__(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        if self.callback is not None:
            self.callback(self.done, self.total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class PhaseBars:
    """`(phase, fraction)` reports (the server's: extracting, loading) as one bar per phase."""

    def __init__(self, messages: dict[str, str], *, enabled: bool = True, file: TextIO | None = None) -> None:
        self.messages, self.enabled, self.file = messages, enabled, file
        self.phase: str | None = None
        self.bar: Bar | None = None

    def __call__(self, phase: str, fraction: float) -> None:
        if not self.enabled:
            return
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = Bar(self.messages.get(phase, phase), 1.0, unit="%", file=self.file)
        assert self.bar is not None
        self.bar.set_fraction(fraction)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.phase = None, None


def human_bytes(n: float) -> str:
    """A byte count for a person: ``512 B``, ``1.50 KiB``, ``329.36 MiB``, ``4.00 GiB`` (the largest unit)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def _isatty(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False
