"""`llmpack run` and what a built executable runs: bind, print the URL, prepare the model in
the background (the page shows progress), serve on waitress until Ctrl+C / SIGTERM."""
from __future__ import annotations

import argparse
import dataclasses
import errno
import hashlib
import os
import re
import signal
import socket
import sys
import threading
import time
import warnings
import webbrowser
from pathlib import Path
from typing import Any, Callable, Mapping

from llmpack import __version__
from llmpack.errors import LlmpackError
from llmpack.runtime.placement import startup_line
from llmpack.runtime.server.app import MAX_BODY, ServerOptions, create_app
from llmpack.runtime.server.security import WILDCARDS, is_loopback
from llmpack.runtime.server.state import MESSAGES, ServedModel, ServerState

PORT_TRIES = 20
Progress = Callable[[str, float], None]


class ServerError(LlmpackError):
    pass


def waitress_settings(max_num_seqs: int) -> dict[str, Any]:
    """waitress tuned for token streaming: every small write goes out at once (send_bytes=1),
    a thread per open stream (>= 64 plus the engine's batch), a disconnected client noticed
    while its request still runs (request lookahead -> waitress.client_disconnected)."""
    threads = max(128, max_num_seqs + 64)
    return dict(threads=threads, connection_limit=threads + 512, channel_timeout=300, send_bytes=1,
                channel_request_lookahead=1, asyncore_use_poll=True, ident="llmpack",
                max_request_body_size=4 * MAX_BODY, expose_tracebacks=False,
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


# ---------------------------------------------------------------- the model
def _fingerprint(path: Path, name: str | None) -> str:
    stem = path.stem.lower()
    if re.fullmatch(r"[0-9a-f]{64}", stem):   # built executables extract to <sha256>.gguf
        short = stem[:10]
    else:
        size = path.stat().st_size if path.exists() else 0
        short = hashlib.sha256(f"{name}|{path.name}|{size}".encode()).hexdigest()[:10]
    return f"fp_llmpack-{__version__}-{short}"


def _engine_kwargs(cfg_cls: type, **wanted: Any) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cfg_cls)}
    return {k: v for k, v in wanted.items() if k in names and v is not None}


def _gpu_layers(value: Any) -> int | str:
    if value is None:
        return "auto"
    return int(value) if isinstance(value, str) and value.strip().lstrip("-").isdigit() else value


def _special_stop_ids(engine: Any, texts: list[str]) -> list[int]:
    """Stop strings that are single special tokens (<end_of_turn>, <|im_end|>) also stop by id:
    their text may never appear in the output."""
    ids = []
    for text in texts:
        try:
            special = engine.tokenize(text, add_special=False, parse_special=True)
            plain = engine.tokenize(text, add_special=False, parse_special=False)
        except Exception:  # noqa: BLE001
            continue
        if len(special) == 1 and plain != special and special[0] not in ids:
            ids.append(special[0])
    return ids


def build_model(path: Path, args: argparse.Namespace, *, recipe: Any = None, display_name: str | None = None,
                progress: Progress | None = None, warn: Callable[[str], None] | None = None) -> ServedModel:
    """Read the GGUF, resolve the chat format, start the engine (blocking, llama.cpp drives
    progress("loading", f)), and describe the result for the routes."""
    from llmpack.runtime.engine import EngineConfig, LLMEngine
    from llmpack.runtime.model_info import read_model_info
    from llmpack.runtime.recipes import chat_format_for_model

    info = read_model_info(path)
    explicit = recipe if isinstance(recipe, (str, os.PathLike)) else getattr(args, "recipe", None)
    try:
        chat = chat_format_for_model(info, str(explicit) if explicit else None,
                                     recipe_data=recipe if isinstance(recipe, Mapping) else None)
    except LlmpackError as exc:
        if explicit:
            raise
        chat = None
        (warn or print)(f"llmpack: warning: {exc}; /v1/chat/completions is disabled, /v1/completions works")
    trained = info.context_length or 4096
    n_ctx = getattr(args, "ctx", None) or min((chat.context if chat else None) or 4096, trained)
    cfg = EngineConfig(str(path), **_engine_kwargs(
        EngineConfig, n_ctx=n_ctx, max_num_seqs=getattr(args, "parallel", None) or 32,
        gpu_layers=_gpu_layers(getattr(args, "gpu_layers", None)), max_waiting=getattr(args, "max_waiting", None),
        device=getattr(args, "device", None)))
    engine = LLMEngine(cfg, progress=(lambda f: progress("loading", f)) if progress else None)
    try:
        name = display_name or path.stem
        stop = list(chat.stop) if chat else []
        system = getattr(args, "system", None)
        model_id = display_name or path.stem
        return ServedModel(
            engine=engine, model_id=model_id, display_name=name, n_ctx=engine.n_ctx, chat=chat,
            system_prompt=system if system is not None else (chat.system if chat else None),
            sampling=dict(chat.sampling) if chat else {}, stop=stop,
            stop_token_ids=_special_stop_ids(engine, [*stop, *(chat.eot_tokens if chat else ())]),
            fingerprint=_fingerprint(path, info.name), backend=engine.backend,
            aliases=frozenset(a.lower() for a in (model_id, name, path.name, path.stem, info.name) if a),
            meta={"n_ctx_train": info.context_length, "n_vocab": engine.n_vocab, "architecture": info.architecture,
                  "chat_format": chat.source if chat else None, "display_name": name})
    except BaseException:
        engine.shutdown()
        raise


# ---------------------------------------------------------------- the server
class Server:
    """A bound, not yet running server; `run()` serves until `stop()` (any thread)."""

    def __init__(self, args: argparse.Namespace, prepare_model: Callable[[Progress], Path], *,
                 recipe: Any = None, display_name: str | None = None, quiet: bool = False) -> None:
        import waitress

        self.args, self.prepare_model, self.recipe = args, prepare_model, recipe
        self.quiet = quiet
        self.state = ServerState(display_name)
        host = getattr(args, "host", None) or "127.0.0.1"
        self.sock = bind_socket(host, int(getattr(args, "port", 8080)))
        self.port = self.sock.getsockname()[1]
        self.options = ServerOptions(host=host, port=self.port, api_key=getattr(args, "api_key", None) or None,
                                     cors=bool(getattr(args, "cors", False)))
        self.app = create_app(self.state, self.options)
        try:
            with warnings.catch_warnings():   # send_bytes is deprecated, but it is what flushes each chunk
                warnings.simplefilter("ignore", DeprecationWarning)
                self.server = waitress.create_server(
                    self.app, sockets=[self.sock], **waitress_settings(getattr(args, "parallel", None) or 32))
        except BaseException:
            self.sock.close()
            raise
        self.url = url_for(host, self.port)
        self.display_name = display_name
        self._stop = threading.Event()
        self._closed = False
        self._console = _ConsoleProgress(quiet)

    # -- model
    def progress(self, phase: str, fraction: float) -> None:
        self.state.set_progress(phase, fraction)
        self._console(phase, fraction)

    def start_preparing(self) -> threading.Thread:
        t = threading.Thread(target=self._prepare, name="llmpack-prepare", daemon=True)
        t.start()
        return t

    def _prepare(self) -> None:
        try:
            path = Path(self.prepare_model(self.progress))
            self.progress("loading", 0.0)
            model = build_model(path, self.args, recipe=self.recipe, display_name=self.display_name,
                                progress=self.progress, warn=self._say)
        except Exception as exc:  # noqa: BLE001 - shown on the page and the console
            message = str(exc) if isinstance(exc, LlmpackError) else f"{type(exc).__name__}: {exc}"
            self._console.done()
            print(f"llmpack: error: could not load the model: {message}", file=sys.stderr, flush=True)
            self.state.set_error(message.splitlines()[0] if message else "unknown error")
            return
        if self._stop.is_set():
            model.engine.shutdown()
            return
        self.state.set_ready(model)
        self._console.done()
        if model.backend:
            self._say(startup_line(model.backend))
        self._say(f"llmpack: model ready ({model.display_name}, context {model.n_ctx} tokens)")

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    # -- serving
    def announce(self) -> None:
        print(f"llmpack: chat page at {self.url}/  (Ctrl+C to stop)", flush=True)
        print(f"llmpack: OpenAI-compatible API at {self.url}/v1", flush=True)
        print(f"LLMPACK_LISTENING {self.url}", flush=True)
        host = self.options.host
        if not is_loopback(host) and not self.options.api_key:
            bar = "!" * 78
            print(f"{bar}\nllmpack: WARNING: listening on {host} WITHOUT an API key: anyone who can reach this "
                  f"machine\nllmpack: WARNING: can use the model. Add --api-key KEY, or use --host 127.0.0.1.\n{bar}",
                  file=sys.stderr, flush=True)

    def run(self) -> None:
        from waitress import wasyncore

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
        from waitress import wasyncore

        self.state.active.close()
        deadline = time.monotonic() + 3
        while len(self.state.active) and time.monotonic() < deadline:
            wasyncore.loop(timeout=0.05, map=self.server._map, use_poll=True, count=1)
        self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=2)
        model = self.state.model
        if model is not None:
            try:
                model.engine.shutdown()
            except Exception:  # noqa: BLE001
                pass
        wasyncore.close_all(self.server._map)


class _ConsoleProgress:
    """Loading progress on the console: one updating line on a terminal, a few lines otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.last, self.open = quiet, ("", -1), False
        self.tty = sys.stderr.isatty()

    def __call__(self, phase: str, fraction: float) -> None:
        if self.quiet:
            return
        pct = int(max(0.0, min(1.0, fraction)) * 100)
        step = pct if self.tty else pct // 25 * 25
        if (phase, step) == self.last:
            return
        same_phase = self.last[0] == phase
        self.last = (phase, step)
        text = f"llmpack: {MESSAGES.get(phase, phase)}... {pct:3d}%"
        if self.tty:
            sys.stderr.write(("\r" if same_phase else "\n") + text if self.open else text)
            self.open = True
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.open = False


def serve(args: argparse.Namespace, prepare_model: Callable[[Progress], Path], *, recipe: Any = None,
          display_name: str | None = None) -> int:
    server = Server(args, prepare_model, recipe=recipe, display_name=display_name)
    previous = _install_signals(server)   # before announcing: a Ctrl+C right after must stop cleanly
    try:
        server.announce()
        server.start_preparing()
        if not getattr(args, "no_browser", False):
            threading.Thread(target=_open_browser, args=(server.url + "/",), daemon=True).start()
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        _restore_signals(previous)
    print("llmpack: stopped", flush=True)
    return 1 if server.state.phase == "error" else 0


def _open_browser(url: str) -> None:
    try:
        webbrowser.open(url)
    except Exception:  # noqa: BLE001 - no browser is fine: the URL is printed
        pass


def _install_signals(server: Server) -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}

    def on_signal(signum: int, frame: Any) -> None:
        if server._stop.is_set():   # second Ctrl+C: stop waiting
            raise KeyboardInterrupt
        print("\nllmpack: shutting down...", file=sys.stderr, flush=True)
        server.stop()

    for name in ("SIGINT", "SIGTERM", "SIGBREAK"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                previous[sig] = signal.signal(sig, on_signal)
            except (ValueError, OSError):
                pass
    return previous


def _restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError, TypeError):
            pass


def cmd_run(args: argparse.Namespace) -> int:
    from llmpack.runtime.gguf_check import validate_gguf

    path = Path(args.model)
    validate_gguf(path)   # a clear error before anything listens
    return serve(args, lambda progress: path)
