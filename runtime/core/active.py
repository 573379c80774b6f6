"""In-flight engine streams, each with its client's "has it gone away?" check, so that a client
that disconnects (waitress's `waitress.client_disconnected`) or a server shutdown aborts them and
frees their KV blocks. A watcher thread polls the checks a few times a second, so a request whose
client left is aborted even while it waits in the queue or runs without writing (non-streaming)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable


class ActiveRequests:
    """The server's in-flight streams (see the module's docstring)."""

    def __init__(self, interval: float = 0.2) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[Callable[[], bool] | None, list[Any]]] = {}
        self._next = 0
        self._interval = interval
        self._watcher: threading.Thread | None = None
        self._closed = False

    def add(self, streams: Iterable[Any], disconnected: Callable[[], bool] | None) -> int:
        with self._lock:
            self._next += 1
            self._entries[self._next] = (disconnected, list(streams))
            if disconnected is not None and self._watcher is None and not self._closed:
                self._watcher = threading.Thread(target=self._watch, name="llmpack-disconnects", daemon=True)
                self._watcher.start()
            return self._next

    def remove(self, key: int) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def abort_all(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
        for _, streams in entries:
            _abort(streams)

    def close(self) -> None:
        self._closed = True
        self.abort_all()

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(self._interval)
            with self._lock:
                entries = list(self._entries.items())
            for key, (gone, streams) in entries:
                try:
                    left = gone is not None and gone()
                except Exception:  # noqa: BLE001 - a broken check must not kill the watcher
                    left = False
                if left:
                    _abort(streams)
                    self.remove(key)


def _abort(streams: Iterable[Any]) -> None:
    for stream in streams:
        try:
            stream.abort()
        except Exception:  # noqa: BLE001 - aborting twice or after shutdown is harmless
            pass
