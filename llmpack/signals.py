"""Installing and restoring process signal handlers, for the two places that take over
Ctrl+C: the server (stop gracefully) and `llmpack demo` (pass it on to the program it runs).

Names missing on this platform (SIGHUP, SIGBREAK) are skipped; so is everything off the main
thread, where Python does not allow signal handlers.
"""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Iterable

Handler = Callable[[int, Any], None]


def install(handler: Handler, names: Iterable[str]) -> dict[int, Any]:
    """Set `handler` for each named signal; returns the previous handlers for :func:`restore`."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for name in names:
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                previous[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):
                pass
    return previous


def restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):
            pass
