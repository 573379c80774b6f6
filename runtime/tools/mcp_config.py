"""The MCP servers the chat page may use, as configured: `--mcp-config FILE` (stdio programs and
URLs, in the `mcpServers` format of Claude Desktop and Cursor) and the URLs a person adds in the
page's Settings. Plain data and a parser, no MCP SDK: the command line (lifecycle/flags.py) checks
the file with it before the model loads, and `llmpack inspect` imports the flags.

    {"mcpServers": {
        "files":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                   "env": {"KEY": "value"}},
        "notes":  {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."}},
        "legacy": {"url": "http://127.0.0.1:9000/sse", "type": "sse"}}}

A URL server is spoken to over Streamable HTTP, falling back to the older HTTP+SSE transport when
that fails (or over SSE at once with "type": "sse", or a URL ending in /sse).
"""
from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmpack.errors import LlmpackError

MAX_SERVERS = 32
MAX_HEADERS = 32
MAX_TEXT = 4096
NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
TRANSPORTS = ("http", "sse", "stdio")


class McpConfigError(LlmpackError):
    """A configuration that cannot be used; one line naming the field."""


@dataclass(frozen=True)
class McpServerSpec:
    name: str
    transport: str                              # http (Streamable HTTP, SSE fallback), sse or stdio
    source: str = "config"                      # config (--mcp-config) or page (added in Settings)
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise McpConfigError(f"{where} must be text of 1 to {MAX_TEXT} characters")
    return value


def _pairs(value: Any, where: str, *, header: bool = False) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or len(value) > MAX_HEADERS:
        raise McpConfigError(f"{where} must be an object of at most {MAX_HEADERS} names and their text values")
    out = []
    for k, v in value.items():
        if header and not re.fullmatch(r"[A-Za-z0-9-]{1,64}", k):
            raise McpConfigError(f"{where} has a header name {k[:40]!r} that is not one (letters, digits and '-')")
        if not isinstance(v, str) or len(v) > MAX_TEXT or (header and any(c in v for c in "\r\n")):
            raise McpConfigError(f"{where}.{k[:40]} must be text of at most {MAX_TEXT} characters on one line")
        out.append((k, v))
    return tuple(out)


def check_url(url: Any, where: str) -> str:
    url = _text(url, where)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise McpConfigError(f"{where} must be an http:// or https:// address, not {url[:80]!r}")
    return url


def server_spec(name: Any, entry: Any, *, source: str, where: str) -> McpServerSpec:
    """One server's entry, checked."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise McpConfigError(f"{where}: a server's name must be 1 to 32 letters, digits, '.', '-' or '_' "
                             f"(not {str(name)[:40]!r})")
    at = f"{where}.{name}"
    if not isinstance(entry, dict):
        raise McpConfigError(f"{at} must be an object with a \"command\" (a program) or a \"url\"")
    if entry.get("command") is not None:
        if source != "config":
            raise McpConfigError(f"{at}: only --mcp-config may start programs; the page adds servers by URL")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) and len(a) <= MAX_TEXT for a in args):
            raise McpConfigError(f"{at}.args must be a list of text")
        return McpServerSpec(name=name, transport="stdio", source=source, command=_text(entry["command"], f"{at}.command"),
                             args=tuple(args), env=_pairs(entry.get("env"), f"{at}.env"))
    if entry.get("url") is None:
        raise McpConfigError(f"{at} needs a \"command\" (a program to start) or a \"url\"")
    url = check_url(entry["url"], f"{at}.url")
    kind = entry.get("type") or entry.get("transport") or ""
    if kind not in ("", "http", "streamable-http", "streamable_http", "sse"):
        raise McpConfigError(f"{at}.type must be \"http\" (Streamable HTTP) or \"sse\", not {str(kind)[:40]!r}")
    sse = kind == "sse" or (not kind and urllib.parse.urlsplit(url).path.rstrip("/").endswith("/sse"))
    return McpServerSpec(name=name, transport="sse" if sse else "http", source=source, url=url,
                         headers=_pairs(entry.get("headers"), f"{at}.headers", header=True))


def parse_config(data: Any, where: str = "mcpServers") -> tuple[McpServerSpec, ...]:
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError("the MCP configuration must be a JSON object with \"mcpServers\": {name: {...}}, "
                             "as Claude Desktop's claude_desktop_config.json")
    if len(servers) > MAX_SERVERS:
        raise McpConfigError(f"{where} names {len(servers)} servers; at most {MAX_SERVERS}")
    return tuple(server_spec(n, e, source="config", where=where) for n, e in servers.items())


def load_config(path: str | Path) -> tuple[McpServerSpec, ...]:
    """The servers of an `--mcp-config` file; McpConfigError (one line) when it cannot be used."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"cannot read the MCP configuration {path} ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    try:
        return parse_config(data)
    except McpConfigError as exc:
        raise McpConfigError(f"{path}: {exc}") from None


def page_servers(data: Any) -> tuple[McpServerSpec, ...]:
    """The servers the page added ({"servers": [{name, url, headers}]}), checked; URLs only."""
    items = data.get("servers") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) > MAX_SERVERS:
        raise McpConfigError(f"'servers' must be a list of at most {MAX_SERVERS} servers")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("command") is not None:
            raise McpConfigError(f"servers[{i}] must be {{\"name\", \"url\", \"headers\"?}}: the page adds servers by URL")
        out.append(server_spec(item.get("name"), {k: item.get(k) for k in ("url", "headers", "type")},
                               source="page", where=f"servers[{i}]"))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise McpConfigError("servers: each server needs its own name")
    return tuple(out)
