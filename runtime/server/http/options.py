"""How this server was started, as the routes and guards need it (made by lifecycle/server.py
from the ServeConfig)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

# --cors: False (no other web site), True (every web site: `--cors` alone or `--cors '*'`), or the
# origins allowed, each as a browser writes it in `Origin` (scheme://host[:port], lower case, no
# default port; server/config.py parse_cors makes them)
Cors = Union[bool, tuple[str, ...]]

MAX_BODY = 8 * 1024 * 1024       # a request body's limit, except routes that carry files


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0                      # the bound port (set once it is known)
    api_key: str | None = None
    cors: Cors = False
    max_body: int = MAX_BODY
    webui_dir: Path | None = None      # default: the installed llmpack.webui package
    extra_hosts: tuple[str, ...] = ()  # more Host names to accept
    chat_token: str | None = None      # this launch's secret for saved chats (page/chat_routes); None: off
    mcp_config: Path | None = None     # --mcp-config: the MCP servers the page's tools may use (runtime/tools/mcp_config.py)
