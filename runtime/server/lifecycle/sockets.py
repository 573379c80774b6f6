"""Binding the listening socket (the next free port when the asked one is busy) and the
waitress settings a token-streaming server needs."""
from __future__ import annotations

import errno
import os
import socket
from typing import Any

from llmpack.errors import LlmpackError
from llmpack.runtime.core.attachments import ATTACH_BODY
from llmpack.runtime.server.http.options import MAX_BODY
from llmpack.runtime.server.http.security import WILDCARDS

PORT_TRIES = 20


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
                # the largest route's limit plus room, so the app (not waitress) words the 413 (security.body_limit)
                max_request_body_size=ATTACH_BODY + MAX_BODY,
                expose_tracebacks=False,
                clear_untrusted_proxy_headers=True, cleanup_interval=15)


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
