"""A bound, not yet running server: the Flask app on waitress, the model prepared on a background
thread while /health and the page show progress, and a clean stop from any thread."""
from __future__ import annotations

import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import waitress
from waitress import wasyncore

from llmpack import heap, signals
from llmpack.errors import LlmpackError
from llmpack.progress import PhaseBars
from llmpack.runtime.hardware.placement import startup_line
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.server.app import create_app
from llmpack.runtime.server.config import ServeConfig
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.security import is_loopback
from llmpack.runtime.server.http.state import MESSAGES, ServerState
from llmpack.runtime.server.lifecycle.prepare import Progress, build_model
from llmpack.runtime.server.lifecycle.sockets import bind_socket, url_for, waitress_settings

# How long Ctrl+C waits for the preparing thread. The model load gives up at its next progress
# callback; only context creation and backend loading cannot be interrupted (seconds at most).
PREPARE_WAIT_S = 30.0


class Server:
    """A bound, not yet running server; `run()` serves until `stop()` (any thread)."""

    def __init__(self, config: ServeConfig, prepare_model: Callable[[Progress], Path | ModelFile], *,
                 quiet: bool = False) -> None:
        self.config, self.prepare_model = config, prepare_model
        self.quiet = quiet
        self.state = ServerState(config.display_name)
        host = config.host
        self.sock = bind_socket(host, config.port)
        try:   # from here on a failure (or Ctrl+C) must not leave the port bound until exit
            self.port = self.sock.getsockname()[1]
            self.options = ServerOptions(host=host, port=self.port, api_key=config.api_key or None,
                                         cors=config.cors, chat_token=secrets.token_urlsafe(24),
                                         mcp_config=config.mcp_config)
            self.app = create_app(self.state, self.options)
            # our own socket map (waitress's `map` argument), so running and closing the server
            # needs no private attribute of waitress's
            self._sockets: dict = {}
            self.server = waitress.create_server(
                self.app, map=self._sockets, sockets=[self.sock], **waitress_settings(config.parallel))
        except BaseException:
            self.sock.close()
            raise
        self.url = url_for(host, self.port)
        self.page_url = f"{self.url}/?token={self.options.chat_token}"   # unlocks saved chats (chat_routes)
        self.display_name = config.display_name
        self._stop = threading.Event()
        self._closed = False
        self.closed = threading.Event()   # set when close() has finished (a closing console window waits on it)
        self._preparing: threading.Thread | None = None
        self._console = PhaseBars(MESSAGES, enabled=not quiet)   # extracting, loading
        heap.tune()   # before the model and the requests allocate: llmpack/heap.py
        self.heap = heap.HeapKeeper()

    # -- model
    def progress(self, phase: str, fraction: float, unpack: dict | None = None) -> bool:
        """Show progress on the page and the console. False once the server is stopping: the
        work then gives up (llama.cpp's load callback returns it, unpacking raises Stopping).
        `unpack` ({"path", "bytes"}): where a model is about to be unpacked, for /health."""
        if self._stop.is_set():
            return False
        if unpack is not None:
            self.state.unpack = unpack
        self.state.set_progress(phase, fraction)
        self._console(phase, fraction)
        return True

    def start_preparing(self) -> threading.Thread:
        t = threading.Thread(target=self._prepare, name="llmpack-prepare", daemon=True)
        self._preparing = t
        t.start()
        return t

    def still_preparing(self) -> bool:
        return self._preparing is not None and self._preparing.is_alive()

    def _prepare(self) -> None:
        try:
            prepared = self.prepare_model(self.progress)   # a Path, or a ModelFile (a region of a built program)
            if not self.progress("loading", 0.0):
                self._console.close()
                return
            model = build_model(prepared, self.config, progress=self.progress, warn=self._say, files=self.state.files)
        except Exception as exc:  # noqa: BLE001 - shown on the page and the console
            if self._stop.is_set():   # abandoned because we are stopping: not an error
                self._console.close()
                return
            message = str(exc) if isinstance(exc, LlmpackError) else f"{type(exc).__name__}: {exc}"
            self._console.close()
            print(f"llmpack: error: could not load the model: {message}", file=sys.stderr, flush=True)
            self.state.set_error(message.splitlines()[0] if message else "unknown error")
            return
        if self._stop.is_set():
            model.engine.shutdown()
            return
        self.state.set_ready(model)
        self.heap.start()   # gives back what loading freed, then what bursts of requests leave
        self._console.close()
        if model.backend:
            self._say(startup_line(model.backend, verbose=self.config.verbose))
        self._say(f"llmpack: model ready ({model.display_name}, context {model.n_ctx} tokens)")

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    # -- serving
    def announce(self) -> None:
        print(f"llmpack: chat page at {self.page_url}  (Ctrl+C to stop)", flush=True)
        print(f"llmpack: OpenAI-compatible API at {self.url}/v1", flush=True)
        print(f"LLMPACK_LISTENING {self.url}", flush=True)
        host = self.options.host
        if not is_loopback(host) and not self.options.api_key:
            bar = "!" * 78
            print(f"{bar}\nllmpack: WARNING: listening on {host} WITHOUT an API key: anyone who can reach this "
                  f"machine\nllmpack: WARNING: can use the model. Add --api-key KEY, or use --host 127.0.0.1.\n{bar}",
                  file=sys.stderr, flush=True)

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                wasyncore.loop(timeout=0.25, map=self._sockets, use_poll=True, count=1)
        finally:
            self.close()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def watch_console_close(self) -> None:
        """Windows: the console window's close button stops the server like Ctrl+C; the callback
        lives as long as the server (kept here), and the window waits until close() is done."""
        self._console_close = signals.on_console_close(self.stop, self.closed.wait)

    def stop(self) -> None:
        self._stop.set()
        try:
            self.server.pull_trigger()
        except Exception:  # noqa: BLE001
            pass

    def close(self) -> None:
        """Abort running requests, let their last chunks go out, stop the engine, close sockets."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.heap.stop()
        self.state.active.close()
        deadline = time.monotonic() + 3
        while len(self.state.active) and time.monotonic() < deadline:
            wasyncore.loop(timeout=0.05, map=self._sockets, use_poll=True, count=1)
        self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=2)
        self._wait_for_preparation()
        model = self.state.model
        if model is not None:
            try:
                model.engine.shutdown()
            except Exception:  # noqa: BLE001
                pass
        self.state.files.close()
        wasyncore.close_all(self._sockets)
        self.closed.set()

    def _wait_for_preparation(self) -> None:
        """Python must not exit while the preparing thread is inside llama.cpp. At interpreter
        shutdown a daemon thread that calls back into Python (a log line, a progress report) is
        ended with pthread_exit; unwinding that through llama.cpp's C++ frames aborts the process
        ("FATAL: exception not rethrown", exit 134) instead of the clean exit Ctrl+C deserves."""
        if self.still_preparing():
            try:
                self._preparing.join(PREPARE_WAIT_S)  # type: ignore[union-attr]
            except KeyboardInterrupt:   # another Ctrl+C: stop waiting
                pass
