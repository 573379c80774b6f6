"""The MCP client side of the chat page's tools: one session per configured server, kept open on
an asyncio loop of its own (a daemon thread), spoken through the official SDK (PyPI `mcp`).

The page never talks to an MCP server itself (it keeps `connect-src 'self'`); it asks this app
(mcp_routes.py), which talks only to the servers in `--mcp-config` and those the page added in
Settings (by URL, never a program). Each server is bounded on its own, so one that misbehaves
costs only its own line in Settings:

- connecting (initialize + the tool list) within CONNECT_TIMEOUT, every server at once: ten
  servers take as long as the slowest, and one that never answers is shown down;
- a call answers within the call timeout, else the page hears that it did not;
- every HTTP response a server sends is cut at MAX_RESPONSE_BYTES (a 50 MB result is refused
  while it arrives, not read whole);
- at most MAX_TOOLS tools per server, each description and schema capped;
- a result is text (images and other content are named, not passed on), cut at MAX_RESULT_CHARS.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Iterable

import httpx
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from llmpack.runtime.tools.mcp_config import McpServerSpec
from llmpack.runtime.tools.mcp_stdio import capped_stdio_client

# Closing a session says goodbye to its server (an HTTP DELETE); one that is gone by then is no news.
logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)

MAX_RESPONSE_BYTES = 4 << 20
MAX_RESULT_CHARS = 16_000        # webui/tools.js MAX_RESULT
MAX_TOOLS = 64
MAX_DESCRIPTION = 1_000
MAX_SCHEMA_CHARS = 16_000
CONNECT_TIMEOUT = 10.0
CALL_TIMEOUT_ENV = "LLMPACK_MCP_CALL_TIMEOUT"   # seconds a tool call may take (default 60)
DEFAULT_CALL_TIMEOUT = 60.0
GONE_CHECK_S = 0.25   # how often a call looks whether the page that asked has hung up


class McpCallError(Exception):
    """A call that could not be made or did not finish; `status` is the HTTP status the page gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Link:
    """One configured server and its session (while it is up)."""
    spec: McpServerSpec
    status: str = "down"
    error: str | None = None
    note: str | None = None
    tools: list[dict] = field(default_factory=list)
    session: ClientSession | None = None
    stop: asyncio.Event | None = None
    task: asyncio.Task | None = None
    overflow: asyncio.Event | None = None

    def view(self) -> dict:
        out: dict[str, Any] = {"name": self.spec.name, "source": self.spec.source, "transport": self.spec.transport,
                               "status": self.status, "tools": self.tools}
        if self.spec.url:
            out["url"] = self.spec.url
        if self.error:
            out["error"] = self.error
        if self.note:
            out["note"] = self.note
        return out


class _CappedStream(httpx.AsyncByteStream):
    """A response body that stops at MAX_RESPONSE_BYTES and says so to its link."""

    def __init__(self, inner: httpx.AsyncByteStream, link: _Link) -> None:
        self.inner, self.link, self.seen = inner, link, 0

    async def __aiter__(self):
        async for chunk in self.inner:
            self.seen += len(chunk)
            if self.seen > MAX_RESPONSE_BYTES:
                if self.link.overflow is not None:
                    self.link.overflow.set()
                raise httpx.ReadError(f"the server sent more than {MAX_RESPONSE_BYTES >> 20} MB")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedTransport(httpx.AsyncBaseTransport):
    def __init__(self, link: _Link) -> None:
        self.inner, self.link = httpx.AsyncHTTPTransport(), link

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        return httpx.Response(resp.status_code, headers=resp.headers, stream=_CappedStream(resp.stream, self.link),
                              extensions=resp.extensions, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _describe(exc: BaseException) -> str:
    """One line for a failure, from inside the SDK's exception groups."""
    while getattr(exc, "exceptions", None):   # an exception group (the `exceptiongroup` backport before 3.11)
        exc = exc.exceptions[0]
    if isinstance(exc, httpx.ConnectError):
        return "nothing answers at this address (is the server running?)"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"the server answered HTTP {exc.response.status_code}"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return f"the server did not answer within {CONNECT_TIMEOUT:.0f} s"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if "Timed out" in text:
        return f"the server did not answer within {CONNECT_TIMEOUT:.0f} s"
    if isinstance(exc, FileNotFoundError):
        return f"cannot start {exc.filename or 'the program'}: no such program"
    return text


def _tool(t: types.Tool) -> dict | None:
    if not isinstance(t.name, str) or not 1 <= len(t.name) <= 64:
        return None
    schema = t.inputSchema if isinstance(t.inputSchema, dict) else {"type": "object"}
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        schema = {"type": "object"}
    return {"name": t.name, "description": (t.description or "")[:MAX_DESCRIPTION], "input_schema": schema}


def result_text(r: types.CallToolResult) -> str:
    """A tool's result as the text the page shows and the model reads."""
    parts: list[str] = []
    for c in r.content:
        if isinstance(c, types.TextContent):
            parts.append(c.text)
        elif isinstance(c, types.EmbeddedResource):
            parts.append(getattr(c.resource, "text", None) or f"[a resource: {c.resource.uri}]")
        elif isinstance(c, types.ResourceLink):
            parts.append(f"[a resource: {c.uri}]")
        else:
            parts.append(f"[{getattr(c, 'type', 'content')} ({getattr(c, 'mimeType', '')}) that the chat does not show]")
    if not parts and r.structuredContent is not None:
        parts.append(json.dumps(r.structuredContent, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = (text[:MAX_RESULT_CHARS] + f"\n… [cut: the result was {len(text):,} characters; "
                f"the first {MAX_RESULT_CHARS:,} are kept]")
    return text


class McpHub:
    """The servers this app may reach for the page, and their sessions. Safe from any thread."""

    def __init__(self, configured: Iterable[McpServerSpec] = (), call_timeout: float | None = None) -> None:
        self.configured = tuple(configured)
        env = os.environ.get(CALL_TIMEOUT_ENV, "")
        self.call_timeout = call_timeout or (float(env) if env.replace(".", "", 1).isdigit() else DEFAULT_CALL_TIMEOUT)
        self._links: dict[str, _Link] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ from the routes' threads

    def _submit(self, coro, timeout: float, gone: Callable[[], bool] | None = None):
        """`coro`'s result, run on the hub's loop; cancelled there when `gone()` turns true (the
        page's client hung up: its Stop) or `timeout` passes."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="llmpack-mcp", daemon=True).start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(min(GONE_CHECK_S, max(0.0, deadline - time.monotonic())) if gone else timeout)
            except concurrent.futures.TimeoutError:
                if gone is not None and gone():
                    future.cancel()
                    raise McpCallError(499, "The page stopped this call; the MCP server was told to cancel it.") from None
                if time.monotonic() >= deadline:
                    future.cancel()
                    raise

    def sync(self, page: Iterable[McpServerSpec]) -> list[dict]:
        """Make the page's servers these (the configured ones stay), connect every server that is
        not up, and list them all."""
        wanted = {s.name: s for s in self.configured}
        clash = [s.name for s in page if s.name in wanted]
        wanted.update({s.name: s for s in page if s.name not in wanted})
        listing = self._submit(self._sync(wanted), 3 * CONNECT_TIMEOUT + 10)
        for name in clash:
            listing.append({"name": name, "source": "page", "status": "down", "tools": [],
                            "error": "--mcp-config has a server of this name: give this one another name"})
        return listing

    def listing(self) -> list[dict]:
        return [link.view() for link in list(self._links.values())]

    def call(self, server: str, tool: str, arguments: dict, gone: Callable[[], bool] | None = None) -> str:
        """The tool's result text; McpCallError (with the HTTP status) when there is none. When
        `gone()` turns true the call is cancelled, and the server told so."""
        link = self._links.get(server)
        if link is None:
            raise McpCallError(404, f"No MCP server named {server!r} is configured.")
        if not any(t["name"] == tool for t in link.tools):
            raise McpCallError(404, f"The MCP server {server!r} has no tool {tool!r}.")
        return self._submit(self._call(link, tool, arguments), self.call_timeout + 15, gone)

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            self._submit(self._sync({}), 10)
        except Exception:   # closing: a server that will not stop is left to the process's exit
            pass

    # ------------------------------------------------------------------ on the hub's loop

    async def _sync(self, wanted: dict[str, McpServerSpec]) -> list[dict]:
        for name, link in list(self._links.items()):
            if wanted.get(name) != link.spec:
                del self._links[name]
                await self._disconnect(link)
        for name, spec in wanted.items():
            self._links.setdefault(name, _Link(spec))
        down = [link for link in self._links.values() if link.status != "up"]
        await asyncio.gather(*(self._connect(link) for link in down))
        return self.listing()

    async def _disconnect(self, link: _Link) -> None:
        if link.stop is not None:
            link.stop.set()
        if link.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(link.task), 5)
            except BaseException:
                link.task.cancel()
        link.status, link.session = "down", None

    async def _connect(self, link: _Link) -> None:
        if link.task is not None and not link.task.done():
            await self._disconnect(link)
        link.error = link.note = None
        ready = asyncio.Event()
        link.task = asyncio.get_running_loop().create_task(self._hold(link, ready))
        try:
            await asyncio.wait_for(ready.wait(), 2 * CONNECT_TIMEOUT + 2)
        except asyncio.TimeoutError:
            link.task.cancel()
            link.status, link.error = "down", f"the server did not answer within {CONNECT_TIMEOUT:.0f} s"

    def _http(self, link: _Link):
        def factory(headers=None, timeout=None, auth=None) -> httpx.AsyncClient:
            return httpx.AsyncClient(headers=headers, timeout=timeout, auth=auth, transport=_CappedTransport(link))
        return factory

    async def _transport(self, stack: AsyncExitStack, link: _Link, kind: str):
        spec = link.spec
        if kind == "http":
            client = await stack.enter_async_context(httpx.AsyncClient(
                headers=dict(spec.headers), follow_redirects=True, transport=_CappedTransport(link),
                timeout=httpx.Timeout(CONNECT_TIMEOUT, read=self.call_timeout + 5)))
            return await stack.enter_async_context(streamable_http_client(spec.url or "", http_client=client))
        return await stack.enter_async_context(self._older(link, kind))

    def _older(self, link: _Link, kind: str):
        spec = link.spec
        if kind == "stdio":
            return capped_stdio_client(StdioServerParameters(command=spec.command or "", args=list(spec.args),
                                                             env=dict(spec.env)),
                                       MAX_RESPONSE_BYTES, lambda: link.overflow and link.overflow.set())
        return sse_client(spec.url or "", headers=dict(spec.headers), timeout=CONNECT_TIMEOUT,
                          sse_read_timeout=24 * 3600, httpx_client_factory=self._http(link))

    async def _open(self, stack: AsyncExitStack, link: _Link, kind: str) -> ClientSession:
        streams = await self._transport(stack, link, kind)
        session = await stack.enter_async_context(
            ClientSession(streams[0], streams[1], read_timeout_seconds=timedelta(seconds=CONNECT_TIMEOUT)))
        await session.initialize()
        tools, cursor, total = [], None, 0
        for _ in range(20):   # pages of the list
            page = await session.list_tools(cursor)
            total += len(page.tools)
            tools += [t for t in map(_tool, page.tools) if t is not None]
            cursor = page.nextCursor
            if not cursor or len(tools) >= MAX_TOOLS:
                break
        link.tools = tools[:MAX_TOOLS]
        if total > MAX_TOOLS:
            link.note = (f"This server offers {total if not cursor else 'more than ' + str(total)} tools; the model is "
                         f"offered the first {MAX_TOOLS}.")
        return session

    async def _hold(self, link: _Link, ready: asyncio.Event) -> None:
        """The session's life, in one task (the SDK's transports must be left in the task that entered them)."""
        kinds = {"http": ("http", "sse"), "sse": ("sse",), "stdio": ("stdio",)}[link.spec.transport]
        try:
            for i, kind in enumerate(kinds):
                async with AsyncExitStack() as stack:
                    link.overflow = asyncio.Event()
                    try:
                        link.session = await self._open(stack, link, kind)
                    except Exception as exc:
                        if i + 1 < len(kinds):
                            continue   # Streamable HTTP failed: try the older HTTP+SSE transport
                        raise exc
                    link.status, link.error = "up", None
                    link.stop = asyncio.Event()
                    ready.set()
                    await link.stop.wait()
                    return
        except BaseException as exc:   # an exception group of the SDK's task groups, or cancellation
            link.error = link.error or _describe(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            link.status, link.session = "down", None
            link.tools = [] if link.error else link.tools
            ready.set()

    async def _call(self, link: _Link, tool: str, arguments: dict) -> str:
        session = link.session
        if session is None or link.status != "up":
            raise McpCallError(503, f"The MCP server {link.spec.name!r} is not answering"
                               f"{': ' + link.error if link.error else ''}. Reconnect it in Settings.")
        overflow = link.overflow or asyncio.Event()
        overflow.clear()
        t0 = time.monotonic()
        ids: list[int] = []

        async def tool_call() -> types.CallToolResult:
            # The JSON-RPC id this request takes, to cancel it by: the SDK (1.30) numbers requests
            # with a counter that send_request reads before its first await, so nothing comes between.
            ids.append(session._request_id)
            return await session.call_tool(tool, arguments, read_timeout_seconds=timedelta(seconds=self.call_timeout))

        call = asyncio.ensure_future(tool_call())
        watch = asyncio.ensure_future(overflow.wait())
        try:
            done, _ = await asyncio.wait({call, watch}, timeout=self.call_timeout + 5, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:   # the page's Stop: the tool stops too, where the server honours it
            call.cancel()
            await self._cancelled(session, ids)
            raise
        finally:
            watch.cancel()
        if call not in done:
            call.cancel()
            await self._cancelled(session, ids)
            if overflow.is_set():
                raise McpCallError(502, f"The MCP server {link.spec.name!r} sent more than {MAX_RESPONSE_BYTES >> 20} MB "
                                   "for this call; llmpack stopped reading it.")
            raise McpCallError(504, f"The MCP server {link.spec.name!r} did not answer within {self.call_timeout:.0f} s.")
        try:
            result = call.result()
        except Exception as exc:
            if overflow.is_set():
                raise McpCallError(502, f"The MCP server {link.spec.name!r} sent more than {MAX_RESPONSE_BYTES >> 20} MB "
                                   "for this call; llmpack stopped reading it.") from None
            if "Timed out" in str(exc) or time.monotonic() - t0 >= self.call_timeout:
                raise McpCallError(504, f"The MCP server {link.spec.name!r} did not answer within "
                                   f"{self.call_timeout:.0f} s.") from None
            raise McpCallError(502, f"The MCP server {link.spec.name!r} failed: {_describe(exc)}") from None
        text = result_text(result)
        if result.isError:
            raise McpCallError(200, text or "The tool reported an error.")
        return text

    @staticmethod
    async def _cancelled(session: ClientSession, ids: list[int]) -> None:
        """Tell the server that the request is cancelled (MCP's notifications/cancelled): cancelling
        the SDK's call only stops waiting for its answer; the tool would run on."""
        if not ids:
            return
        note = types.CancelledNotification(params=types.CancelledNotificationParams(
            requestId=ids[0], reason="The user stopped this call."))
        try:
            await asyncio.wait_for(session.send_notification(types.ClientNotification(note)), 5)
        except Exception:   # a server gone already cannot be told
            pass
