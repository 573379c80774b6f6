"""MCP's stdio transport with a cap on what a server may write in one message.

The SDK's `stdio_client` (mcp 1.30) joins a line's chunks with `buffer + chunk`: a program that
writes one 50 MB line is copied over and over on the hub's loop (every other MCP server waits)
and held whole in memory. This is the same transport - one JSON-RPC message per line, read with
the SDK's message types, the process started, put in a Windows job object and ended (stdin
closed, then SIGTERM, then SIGKILL of its tree) by the SDK's own helpers - except that a line
longer than `max_bytes` is skipped to its end and reported through `on_overflow`, and the
session goes on with the next line, as the HTTP transports' cap does (mcp_hub._CappedStream).
"""
from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable, TextIO

import anyio
import anyio.lowlevel
from mcp import StdioServerParameters, types
from mcp.client.stdio import (PROCESS_TERMINATION_TIMEOUT, _create_platform_compatible_process,
                              _get_executable_command, _terminate_process_tree, get_default_environment)
from mcp.shared.message import SessionMessage


class Lines:
    """Splits a byte stream into lines of at most `max_bytes`; a longer line is dropped whole."""

    def __init__(self, max_bytes: int, on_overflow: Callable[[], None]) -> None:
        self.max_bytes, self.on_overflow = max_bytes, on_overflow
        self.parts: list[bytes] = []
        self.size = 0
        self.skipping = False

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = []
        while chunk:
            head, newline, chunk = chunk.partition(b"\n")
            if not self.skipping:
                self.size += len(head)
                if self.size > self.max_bytes:
                    self.skipping, self.parts, self.size = True, [], 0
                    self.on_overflow()
                else:
                    self.parts.append(head)
            if newline:
                if not self.skipping and self.parts != [b""]:
                    lines.append(b"".join(self.parts))
                self.parts, self.size, self.skipping = [], 0, False
        return lines


@asynccontextmanager
async def capped_stdio_client(server: StdioServerParameters, max_bytes: int, on_overflow: Callable[[], None],
                              errlog: TextIO = sys.stderr) -> AsyncIterator[tuple]:
    """(read stream, write stream) of SessionMessages, as the SDK's stdio_client gives."""
    read_writer, read_stream = anyio.create_memory_object_stream(0)
    write_stream, write_reader = anyio.create_memory_object_stream(0)
    try:
        process = await _create_platform_compatible_process(
            command=_get_executable_command(server.command), args=server.args,
            env={**get_default_environment(), **(server.env or {})}, errlog=errlog, cwd=server.cwd)
    except OSError:
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        raise

    async def stdout_reader() -> None:
        lines = Lines(max_bytes, on_overflow)
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    for line in lines.feed(chunk):
                        try:
                            message = types.JSONRPCMessage.model_validate_json(line)
                        except Exception as exc:   # not a JSON-RPC message: the session reports it
                            await read_writer.send(exc)
                            continue
                        await read_writer.send(SessionMessage(message))
        except anyio.ClosedResourceError:
            await anyio.lowlevel.checkpoint()

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_none=True)
                    await process.stdin.send((text + "\n").encode())
        except anyio.ClosedResourceError:
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tasks, process:
        tasks.start_soon(stdout_reader)
        tasks.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:   # MCP's stdio shutdown: stdin closed, then the process ended if it lingers
            try:
                await process.stdin.aclose()
            except Exception:   # closed already
                pass
            try:
                with anyio.fail_after(PROCESS_TERMINATION_TIMEOUT):
                    await process.wait()
            except TimeoutError:
                await _terminate_process_tree(process)
            except ProcessLookupError:
                pass
            for stream in (read_stream, write_stream, read_writer, write_reader):
                await stream.aclose()
