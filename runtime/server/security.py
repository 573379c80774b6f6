"""Request guards: Host-header check (DNS rebinding), API key, CORS, a few response headers.

DNS rebinding (cf. Ollama CVE-2024-28224): a web page on evil.example can make its own name
resolve to 127.0.0.1 and then talk to this server from the victim's browser *same-origin*. The
browser still sends `Host: evil.example:PORT`, so only requests naming this server are served.
An IP-literal Host cannot come from rebinding, so a server bound to all interfaces also accepts
those (LAN clients). LLMPACK_ALLOWED_HOSTS (comma-separated names) adds names, e.g. behind a proxy.
"""
from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from typing import TYPE_CHECKING

from flask import Flask, Response, request

if TYPE_CHECKING:  # pragma: no cover
    from llmpack.runtime.server.app import ServerOptions

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]"}
WILDCARDS = {"", "0.0.0.0", "::", "[::]"}
KEY_PREFIXES = ("/v1/", "/metrics")


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def split_host(value: str) -> tuple[str, str | None]:
    """'name:port' / '[v6]:port' / 'name' -> (lowercase name, port text or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        name, rest = value[: end + 1], value[end + 1 :]
        return name, (rest[1:] if rest.startswith(":") else (None if not rest else "?"))
    name, sep, port = value.rpartition(":")
    return (name, port) if sep else (value, None)


def allowed_names(options: ServerOptions) -> set[str]:
    names = set(LOOPBACK_NAMES)
    host = (options.host or "").lower()
    if host not in WILDCARDS:
        names.add(_bracket(host))
    else:
        for name in {socket.gethostname(), socket.getfqdn()}:
            if name:
                names.update({name.lower(), f"{name.lower()}.local"})
    extra = os.environ.get("LLMPACK_ALLOWED_HOSTS", "")
    names.update(_bracket(n.strip().lower()) for n in extra.split(",") if n.strip())
    names.update(_bracket(n.lower()) for n in options.extra_hosts)
    return names


def host_ok(header: str | None, options: ServerOptions, names: set[str]) -> bool:
    if not header:   # HTTP/1.0 tools; browsers always send Host
        return True
    name, port = split_host(header)
    if port is not None and port != str(options.port):
        return False
    name = name.rstrip(".")
    if name in names or name.endswith(".localhost"):
        return True
    if (options.host or "").lower() in WILDCARDS:
        try:
            ipaddress.ip_address(name.strip("[]"))
            return True
        except ValueError:
            return False
    return False


def key_ok(authorization: str | None, key: str) -> bool:
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), key.encode("utf-8", "replace"))


def install(app: Flask, options: ServerOptions, error) -> None:
    """Register the guards; `error(status, message, type, code)` builds an OpenAI error response."""
    names = allowed_names(options)

    @app.before_request
    def _guard():
        if not host_ok(request.headers.get("Host"), options, names):
            return error(403, f"Host {request.headers.get('Host')!r} is not this server: requests must "
                         "name it as localhost or 127.0.0.1 (DNS-rebinding protection).",
                         "permission_error", "host_not_allowed")
        if options.cors and request.method == "OPTIONS":
            return Response(status=204)
        if options.api_key and request.path.startswith(KEY_PREFIXES):
            auth = request.headers.get("Authorization")
            if not key_ok(auth, options.api_key):
                msg = ("Incorrect API key provided." if auth else
                       "Missing API key: send it as 'Authorization: Bearer KEY'.")
                return error(401, msg, "invalid_request_error", "invalid_api_key")
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        h = resp.headers
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("Referrer-Policy", "no-referrer")
        h.setdefault("X-Frame-Options", "DENY")
        if options.cors:
            h["Access-Control-Allow-Origin"] = "*"
            h["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            h["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            h["Access-Control-Max-Age"] = "600"
        return resp
