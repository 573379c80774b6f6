"""Installing and restoring process signal handlers, for the two places that take over
Ctrl+C: the server (stop gracefully) and `llmpack demo` (pass it on to the program it runs).

Names missing on this platform (SIGHUP, SIGBREAK) are skipped; so is everything off the main
thread, where Python does not allow signal handlers. On Windows, closing the console window is
not a signal but a console event (:func:`on_console_close`).
"""
from __future__ import annotations

import os
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


# Windows console events (wincon.h) that end the program: the console window's close button, and
# the user logging off or shutting down. Windows ends the process about 5 s after the first.
CLOSE_EVENTS = frozenset({2, 5, 6})      # CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT
CLOSE_GRACE_S = 4.0


def console_close_handler(stop: Callable[[], None], wait: Callable[[float], Any]) -> Callable[[int], bool]:
    """What to do on a console event: for a close, stop as Ctrl+C would and wait (at most
    CLOSE_GRACE_S) for the shutdown, so no half-written file is left; anything else (Ctrl+C,
    Ctrl+Break) goes on to Python's own handler."""
    def handler(event: int) -> bool:
        if event not in CLOSE_EVENTS:
            return False
        stop()
        wait(CLOSE_GRACE_S)
        return True

    return handler


def on_console_close(stop: Callable[[], None], wait: Callable[[float], Any]) -> Any:
    """Windows: closing the console window stops the program cleanly. Returns the registered
    callback (keep it referenced while the program runs), or None elsewhere."""
    if os.name != "nt":
        return None
    import ctypes   # lazy: Windows only (wintypes and windll)
    from ctypes import wintypes

    callback = ctypes.WINFUNCTYPE(wintypes.BOOL, wintypes.DWORD)(console_close_handler(stop, wait))
    if not ctypes.windll.kernel32.SetConsoleCtrlHandler(callback, True):  # type: ignore[attr-defined]
        return None
    return callback
