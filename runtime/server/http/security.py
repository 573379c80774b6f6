"""Request guards: Host-header check (DNS rebinding), API key, CORS, a few response headers.

The API key (--api-key) guards every route except the few marked `@public(why)`: the page and its
static files, /health, and /api/* (which has its own, stronger per-launch secret). A route added
later is therefore guarded until someone decides, in writing, that it should not be (llama-server
does the same: a short list of public endpoints, the key everywhere else). Unknown paths need the
key too, so the 404s of a keyed server say nothing about which routes exist.

Every response carries one Content-Security-Policy (PAGE_CSP), so no second route to an HTML
file, and no SVG opened on its own, can run without it; the one stricter exception is the tool
worker's script (WORKER_CSP: no network at all).

DNS rebinding (cf. Ollama CVE-2024-28224): a web page on evil.example can make its own name
resolve to 127.0.0.1 and then talk to this server from the victim's browser *same-origin*. The
browser still sends `Host: evil.example:PORT`, so only requests naming this server are served.
An IP-literal Host cannot come from rebinding, so a server bound to all interfaces also accepts
those (LAN clients). LLMPACK_ALLOWED_HOSTS (comma-separated names) adds names, e.g. behind a proxy.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, TypeVar

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from llmpack.runtime.core.attachments import ATTACH_BODY
from llmpack.runtime.server.http.errors import error_response as error
from llmpack.runtime.server.http.options import Cors, ServerOptions

F = TypeVar("F", bound=Callable)

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]"}
WILDCARDS = {"", "0.0.0.0", "::", "[::]"}
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
# The chat page's run_javascript tool runs the model's code in a Web Worker started from this file
# (webui/tool-worker.js). A worker lives under the policy its own script came with, so this one is
# stricter than the page's: no network at all (connect-src 'none'), nothing imported; eval, which the
# page never allows itself, only here, where there is no DOM, no storage and nothing to reach.
WORKER_PATH = "/static/tool-worker.js"
WORKER_CSP = "default-src 'none'; script-src 'unsafe-eval'; connect-src 'none'; base-uri 'none'; form-action 'none'"
_PUBLIC = "_llmpack_public"


def public(why: str) -> Callable[[F], F]:
    """Mark a view as served without the API key; `why` is the justification, kept on the view
    (tests/test_route_guards.py lists every public route and fails on one it does not know)."""
    def mark(view: F) -> F:
        setattr(view, _PUBLIC, why)
        return view
    return mark


_BODY_LIMIT = "_llmpack_body_limit"


def body_limit(limit: int) -> Callable[[F], F]:
    """Let a view take bodies up to `limit` bytes instead of the app's max_body (routes that carry
    files). `install` refuses a larger Content-Length before the key check and before anything
    reads the body, and Flask stops a body without one at the same size."""
    def mark(view: F) -> F:
        setattr(view, _BODY_LIMIT, limit)
        return view
    return mark


def carries_files(view: F) -> F:
    """A route whose body may carry files, pictures or sound (base64 in its JSON): the attachments'
    limit, the same on every API that takes them, so a phone photo that one room accepts is never
    a 413 in another. Set here, on the route, because the guard refuses by Content-Length before
    the view runs (a limit raised inside the view comes too late)."""
    return body_limit(ATTACH_BODY)(view)


def route_body_limit(app: Flask, endpoint: str | None, default: int) -> int:
    view = app.view_functions.get(endpoint) if endpoint else None
    return getattr(view, _BODY_LIMIT, default)


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


SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CHALLENGE_PATH = "/api/instance"   # public: without the instance lock's secret its answer proves nothing


def instance_proof(secret: str, nonce: str) -> str:
    """What the server holding `secret` answers to the challenge `nonce` (lifecycle/instance.py)."""
    return hmac.new(secret.encode("utf-8"), nonce.encode("utf-8"), hashlib.sha256).hexdigest()


def cors_allows(cors: Cors | None, origin: str) -> bool:
    """--cors: True lets every origin in; a tuple of origins (server/config.py parse_cors: as a
    browser writes `Origin`, e.g. "https://app.example") only those. `null` is never one."""
    if isinstance(cors, tuple):
        return origin.lower() in cors
    return bool(cors) and origin != "null"


def cross_site(method: str, headers, host: str, cors) -> str | None:
    """Why a browser request from another site must not change anything here, or None.

    A page on any web site (or on another port of this computer) can send this server a
    "simple" POST with `fetch(url, {mode: "no-cors", body})`: no preflight, no reading the
    answer, but the request runs (an extraction, a generation). Browsers say where such a
    request comes from: `Sec-Fetch-Site` (cross-site, same-site: another port of localhost is
    same-site but another origin) and `Origin`. Every state-changing or expensive method
    (anything but GET/HEAD/OPTIONS) from another origin is refused unless --cors allows that
    origin; tools other than browsers send neither header and are not affected."""
    if method in SAFE_METHODS and method != "OPTIONS":
        return None
    origin = headers.get("Origin")
    site = (headers.get("Sec-Fetch-Site") or "").lower()
    # the origin's host:port against Host (not the scheme: a TLS proxy in front changes only that)
    foreign = site in ("cross-site", "same-site") or \
        (origin is not None and urllib.parse.urlsplit(origin).netloc.lower() != host.lower())
    if not foreign or (origin and cors_allows(cors, origin)):
        return None
    if method == "OPTIONS" and not cors:
        return None   # a preflight alone changes nothing; without --cors it gets no CORS headers
    if isinstance(cors, tuple):
        return (f"requests from another web site ({origin or site}) may not use this server: that origin is not "
                f"among those --cors allows ({', '.join(cors)})")
    return (f"requests from another web site ({origin or site}) may not use this server: start it with "
            "--cors ORIGIN to allow that origin")


def key_ok(authorization: str | None, key: str, x_api_key: str | None = None) -> bool:
    """`Authorization: Bearer KEY`, or `x-api-key: KEY` (what Anthropic's clients send)."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    if not given and x_api_key:
        given = x_api_key
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), key.encode("utf-8", "replace"))


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused before its body is read: an HTTP status and the error's words."""
    status: int
    message: str
    type: str
    code: str


def too_large(limit: int) -> Refusal:
    return Refusal(413, f"The request body is larger than {limit >> 20} MiB.", "invalid_request_error",
                   "request_too_large")


def authorized(options: ServerOptions, headers: Mapping[str, str]) -> bool:
    """Whether a caller may use the API: no key is set, or it sent the key (/health says more then)."""
    return not options.api_key or key_ok(headers.get("Authorization"), options.api_key, headers.get("x-api-key"))


def endpoint_for(app: Flask, method: str, path: str) -> str | None:
    """The app's endpoint for `method path`, or None (unknown paths need the key too)."""
    try:
        endpoint, _ = app.url_map.bind("localhost").match(path, method)
    except HTTPException:
        return None
    return endpoint


def refusal(app: Flask, options: ServerOptions, names: set[str], method: str, endpoint: str | None,
            headers: Mapping[str, str], host: str, content_length: int | None) -> Refusal | None:
    """Every guard a request passes before anything reads its body, in order: Host (DNS rebinding),
    another web site, the route's body limit by Content-Length, the API key. The one rule for the
    single server (`install`) and for Ray's ingress (llmpack/ray_server.py's gate), which runs it
    on the same app's routes before it reads a byte of the body."""
    if not host_ok(headers.get("Host"), options, names):
        return Refusal(403, f"Host {headers.get('Host')!r} is not this server: requests must name it as localhost "
                       "or 127.0.0.1 (DNS-rebinding protection).", "permission_error", "host_not_allowed")
    refused = cross_site(method, headers, host, options.cors)
    if refused:
        return Refusal(403, refused, "permission_error", "cross_site_request")
    limit = route_body_limit(app, endpoint, options.max_body)
    if content_length is not None and content_length > limit:
        return too_large(limit)
    if options.cors and method == "OPTIONS":
        return None
    if options.api_key and public_reason(app, endpoint) is None:
        auth, x_key = headers.get("Authorization"), headers.get("x-api-key")
        if not key_ok(auth, options.api_key, x_key):
            msg = ("Incorrect API key provided: send the key this server was started with (--api-key) as "
                   "'Authorization: Bearer KEY' (or 'x-api-key: KEY')." if auth or x_key else
                   "Missing API key: send it as 'Authorization: Bearer KEY' (or 'x-api-key: KEY').")
            return Refusal(401, msg, "invalid_request_error", "invalid_api_key")
    return None


def install(app: Flask, options: ServerOptions) -> None:
    """Register the guards on `app`."""
    names = allowed_names(options)

    @app.before_request
    def _guard():
        refused = refusal(app, options, names, request.method, request.endpoint, request.headers, request.host,
                          request.content_length)
        if refused:
            return error(refused.status, refused.message, refused.type, refused.code)
        request.max_content_length = route_body_limit(app, request.endpoint, options.max_body)
        if options.cors and request.method == "OPTIONS":
            return Response(status=204)
        return None

    @app.after_request
    def _headers(resp: Response) -> Response:
        h = resp.headers
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("Referrer-Policy", "no-referrer")
        h.setdefault("X-Frame-Options", "DENY")
        h["Content-Security-Policy"] = WORKER_CSP if request.path == WORKER_PATH else PAGE_CSP
        origin = request.headers.get("Origin")
        if isinstance(options.cors, tuple):
            h.add("Vary", "Origin")   # the answer differs by origin: a cache must not hand one site's to another
        if options.cors and origin and cors_allows(options.cors, origin):
            # only an allowed origin is named; any other gets no CORS header, so its browser reads nothing
            h["Access-Control-Allow-Origin"] = "*" if options.cors is True else origin
            h["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"   # DELETE: stored responses, Ollama's
            # X-Filename: /v1/extract; x-api-key and anthropic-*: what Anthropic's browser clients send
            h["Access-Control-Allow-Headers"] = ("Authorization, Content-Type, X-Filename, x-api-key, anthropic-version, "
                                                 "anthropic-beta, anthropic-dangerous-direct-browser-access")
            h["Access-Control-Max-Age"] = "600"
            h["Access-Control-Expose-Headers"] = "X-Llmpack-Read"   # which parts of long files were read
        return resp
