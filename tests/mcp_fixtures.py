"""Real MCP servers (tests/mcp_servers.py, FastMCP from the official SDK) as processes for the tool
tests: `from mcp_fixtures import *` brings in `friendly_mcp` and `hostile_mcp` (Streamable HTTP
URLs, one process per test module) and `mcp_config` (a --mcp-config file that starts the friendly
server as a stdio program)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from helpers.ports import free_port

__all__ = ["SERVERS", "friendly_mcp", "hostile_mcp", "mcp_config", "start_mcp", "free_port"]
SERVERS = Path(__file__).resolve().parent / "mcp_servers.py"


def start_mcp(kind: str) -> tuple[subprocess.Popen, str]:
    """`kind`'s server over Streamable HTTP; (process, its /mcp URL) once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS), kind, "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {kind} MCP server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the {kind} MCP server did not listen within 60 s")


def _served(kind: str) -> Iterator[str]:
    proc, url = start_mcp(kind)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def friendly_mcp() -> Iterator[str]:
    yield from _served("friendly")


@pytest.fixture(scope="module")
def hostile_mcp() -> Iterator[str]:
    yield from _served("hostile")


@pytest.fixture
def mcp_config(tmp_path: Path) -> Path:
    """Claude Desktop's format: the friendly server as a stdio program."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"local": {"command": sys.executable,
                                                         "args": [str(SERVERS), "friendly", "stdio"]}}}), "utf-8")
    return path
