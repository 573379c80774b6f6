"""Request guards: Host-header check (DNS rebinding), API key, CORS, a few response headers.

The API key (--api-key) guards every route except the few marked `@public(why)`: the page and its
static files, /health, and /api/* (which has its own, stronger per-launch secret). A route added
later is therefore guarded until someone decides, in writing, that it should not be (llama-server
does the same: a short list of public endpoints, the key everywhere else). Unknown paths need the
key too, so the 404s of a keyed server say nothing about which routes exist.

Every response carries one Content-Security-Policy (PAGE_CSP), so no second route to an HTML
file, and no SVG opened on its own, can run without it.

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
from typing import Callable, TypeVar

from flask import Flask, Response, request

from llmpack.runtime.server.http.errors import error_response as error
from llmpack.runtime.server.http.options import ServerOptions

F = TypeVar("F", bound=Callable)

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]"}
WILDCARDS = {"", "0.0.0.0", "::", "[::]"}
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_PUBLIC = "_llmpack_public"


def public(why: str) -> Callable[[F], F]:
    """Mark a view as served without the API key; `why` is the justification, kept on the view
    (tests/test_route_guards.py lists every public route and fails on one it does not know)."""
    def mark(view: F) -> F:
        setattr(view, _PUBLIC, why)
        return view
    return mark


def public_reason(app: Flask, endpoint: str | None) -> str | None:
    """Why `endpoint` needs no API key, or None when it needs one (unknown endpoints do)."""
    view = app.view_functions.get(endpoint) if endpoint else None
    return getattr(view, _PUBLIC, None)


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


def install(app: Flask, options: ServerOptions) -> None:
    """Register the guards on `app`."""
    names = allowed_names(options)

    @app.before_request
    def _guard():
        if not host_ok(request.headers.get("Host"), options, names):
            return error(403, f"Host {request.headers.get('Host')!r} is not this server: requests must "
                         "name it as localhost or 127.0.0.1 (DNS-rebinding protection).",
                         "permission_error", "host_not_allowed")
        if options.cors and request.method == "OPTIONS":
            return Response(status=204)
        if options.api_key and public_reason(app, request.endpoint) is None:
            auth = request.headers.get("Authorization")
            if not key_ok(auth, options.api_key):
                msg = ("Incorrect API key provided: send the key this server was started with (--api-key) as "
                       "'Authorization: Bearer KEY'." if auth else
                       "Missing API key: send it as 'Authorization: Bearer KEY'.")
                return error(401, msg, "invalid_request_error", "invalid_api_key")
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        h = resp.headers
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("Referrer-Policy", "no-referrer")
        h.setdefault("X-Frame-Options", "DENY")
        h["Content-Security-Policy"] = PAGE_CSP
        if options.cors:
            h["Access-Control-Allow-Origin"] = "*"
            h["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            h["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            h["Access-Control-Max-Age"] = "600"
        return resp
