"""`llmpack run` and what a built executable runs: bind, print the URL, prepare the model in
the background (the page shows progress), serve on waitress until Ctrl+C / SIGTERM."""
from __future__ import annotations

import errno
import html
import os
import secrets
import socket
import sys
import threading
import time
import urllib.parse
import webbrowser
from pathlib import Path
from typing import Any, Callable

import platformdirs
import waitress
from waitress import wasyncore

from llmpack import signals
from llmpack.errors import LlmpackError
from llmpack.progress import PhaseBars
from llmpack.runtime.hardware.placement import startup_line
from llmpack.runtime.server.app import MAX_BODY, ServerOptions, create_app
from llmpack.runtime.server.attachments import ATTACH_BODY
from llmpack.runtime.server.chats import data_dir
from llmpack.runtime.server.config import ServeConfig
from llmpack.runtime.server.security import WILDCARDS, is_loopback
from llmpack.runtime.server.serving import Progress, build_model
from llmpack.runtime.server.state import MESSAGES, ServerState

PORT_TRIES = 20
# How long Ctrl+C waits for the preparing thread. The model load gives up at its next progress
# callback; only context creation and backend loading cannot be interrupted (seconds at most).
PREPARE_WAIT_S = 30.0


class ServerError(LlmpackError):
    pass


def waitress_settings(max_num_seqs: int) -> dict[str, Any]:
    """waitress tuned for token streaming: a thread per open stream (>= 64 plus the engine's
    batch), a disconnected client noticed while its request still runs (request lookahead ->
    waitress.client_disconnected). Every small write (one SSE event) goes out at once: that is
    waitress's default since 1.3, which deprecated the send_bytes option that used to ask for it."""
    threads = max(128, max_num_seqs + 64)
    return dict(threads=threads, connection_limit=threads + 512, channel_timeout=300,
                channel_request_lookahead=1, asyncore_use_poll=True, ident="llmpack",
                max_request_body_size=ATTACH_BODY + 4 * MAX_BODY, expose_tracebacks=False,
                clear_untrusted_proxy_headers=True, cleanup_interval=15)


# ---------------------------------------------------------------- binding
def _bind(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    infos.sort(key=lambda i: i[0] != socket.AF_INET)   # prefer IPv4 for "localhost"
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name == "nt":   # SO_REUSEADDR on Windows would let us share a busy port
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_EXCLUSIVEADDRUSE", -5), 1)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind `port`, or the next free one up to +20; port 0 = any free port."""
    if not 0 <= port <= 65535:
        raise ServerError(f"--port must be from 0 to 65535, not {port}")
    last: OSError | None = None
    for p in ([0] if port == 0 else range(port, min(port + PORT_TRIES, 65535) + 1)):
        try:
            return _bind(host, p)
        except socket.gaierror as exc:
            raise ServerError(f"cannot use --host {host!r}: {exc.strerror}") from None
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES, getattr(errno, "WSAEADDRINUSE", -1), 10013):
                raise ServerError(f"cannot listen on {host}:{p}: {exc.strerror or exc}") from None
            last = exc
    raise ServerError(f"ports {port}-{port + PORT_TRIES} on {host} are all busy ({last.strerror if last else ''}); "
                      "stop the other program or pass --port 0 for any free port")


def url_for(host: str, port: int) -> str:
    shown = "127.0.0.1" if host.lower() in WILDCARDS else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


# ---------------------------------------------------------------- the server
class Server:
    """A bound, not yet running server; `run()` serves until `stop()` (any thread)."""

    def __init__(self, config: ServeConfig, prepare_model: Callable[[Progress], Path], *, quiet: bool = False) -> None:
        self.config, self.prepare_model = config, prepare_model
        self.quiet = quiet
        self.state = ServerState(config.display_name)
        host = config.host
        self.sock = bind_socket(host, config.port)
        try:   # from here on a failure (or Ctrl+C) must not leave the port bound until exit
            self.port = self.sock.getsockname()[1]
            self.options = ServerOptions(host=host, port=self.port, api_key=config.api_key or None,
                                         cors=config.cors, chat_token=secrets.token_urlsafe(24))
            self.app = create_app(self.state, self.options)
            self.server = waitress.create_server(
                self.app, sockets=[self.sock], **waitress_settings(config.parallel))
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

    # -- model
    def progress(self, phase: str, fraction: float) -> bool:
        """Show progress on the page and the console. False once the server is stopping: the
        work then gives up (llama.cpp's load callback returns it, unpacking raises Stopping)."""
        if self._stop.is_set():
            return False
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
            path = Path(self.prepare_model(self.progress))
            if not self.progress("loading", 0.0):
                self._console.close()
                return
            model = build_model(path, self.config, progress=self.progress, warn=self._say)
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
                wasyncore.loop(timeout=0.25, map=self.server._map, use_poll=True, count=1)
        finally:
            self.close()

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
        self.state.active.close()
        deadline = time.monotonic() + 3
        while len(self.state.active) and time.monotonic() < deadline:
            wasyncore.loop(timeout=0.05, map=self.server._map, use_poll=True, count=1)
        self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=2)
        self._wait_for_preparation()
        model = self.state.model
        if model is not None:
            try:
                if model.embedder is not None:   # its context uses the engine's model: free it first
                    model.embedder.close()
                model.engine.shutdown()
            except Exception:  # noqa: BLE001
                pass
        wasyncore.close_all(self.server._map)
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


def serve(config: ServeConfig, prepare_model: Callable[[Progress], Path]) -> int:
    server = Server(config, prepare_model)
    opened: list[Path | None] = []
    previous: dict = {}
    try:
        previous = _install_signals(server)   # before announcing: a Ctrl+C right after must stop cleanly
        # Windows: the console window's close button stops it the same way (the callback lives as long as the server)
        server.console_close = signals.on_console_close(server.stop, server.closed.wait)
        server.announce()
        server.start_preparing()
        if config.open_browser:
            threading.Thread(target=lambda: opened.append(open_browser(server.page_url)), daemon=True).start()
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        signals.restore(previous)
        for path in filter(None, opened):
            _remove(path)
    print("llmpack: stopped", flush=True)
    rc = 1 if server.state.phase == "error" else 0
    if server.still_preparing():   # inside llama.cpp past PREPARE_WAIT_S: skip the shutdown that would abort
        print("llmpack: the model was still loading; exiting without waiting for it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(rc)
    return rc


def runtime_dir() -> Path:
    """This user's private folder for files that live as long as a launch (0700 where POSIX
    modes exist): the per-user runtime folder (/run/user/UID/llmpack, %LOCALAPPDATA%\\Temp\\llmpack), else
    a `runtime` folder in the data folder, as Jupyter keeps its own."""
    for folder in (Path(platformdirs.user_runtime_dir("llmpack", appauthor=False)), data_dir() / "runtime"):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.name != "nt":
                os.chmod(folder, 0o700)
            return folder
        except OSError:
            continue
    raise OSError("no private folder for the browser's launch file")


def open_browser(url: str) -> Path | None:
    """Open `url` (which carries the chat secret) in the user's browser without putting it on a
    command line, where other users can read it (/proc/*/cmdline, Task Manager): a 0600 HTML file
    in the runtime folder redirects to it, and the browser is given that file's path, as Jupyter
    does. Goes through Python's webbrowser (os.startfile on Windows). Returns the file, for the
    server to delete when it stops; None when it could not be written (the printed link remains)."""
    port = urllib.parse.urlsplit(url).port
    try:
        path = (runtime_dir() / f"open-{port}.html").absolute()   # as_uri() needs an absolute path
        target = html.escape(url, quote=True)
        page = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                f'<meta http-equiv="refresh" content="0;url={target}"><title>Opening the chat</title></head>\n'
                f'<body><p>Opening <a href="{target}">the chat page</a>...</p></body></html>\n')
        path.unlink(missing_ok=True)   # a fresh file, so O_CREAT applies the mode below
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError:
        return None
    try:
        webbrowser.open(path.as_uri())
    except Exception:  # noqa: BLE001 - no browser is fine: the URL is printed
        pass
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _install_signals(server: Server) -> dict:
    def on_signal(signum: int, frame: Any) -> None:
        if server._stop.is_set():   # second Ctrl+C: stop waiting
            raise KeyboardInterrupt
        print("\nllmpack: shutting down...", file=sys.stderr, flush=True)
        server.stop()

    return signals.install(on_signal, ("SIGINT", "SIGTERM", "SIGBREAK"))
