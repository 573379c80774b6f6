"""What `llmpack run` and a built file were asked to serve, typed, made from the command line in
one place (lifecycle/flags.py `serve_config`, which the CLI and a built file's entry share).
Nothing else sees argparse: the server and `lifecycle/prepare.build_model` read this, and the
engine gets its own `EngineConfig` from it (`serve --ray` hands it to each replica as it is)."""
from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from llmpack.runtime.engine.config import FLASH_ATTN, GPU_LAYERS, MAX_NUM_SEQS, MAX_WAITING, SPECULATIVE, TARGET_GAP_MS

if TYPE_CHECKING:
    from llmpack.runtime.server.http.options import Cors

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080

DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*\Z")


def parse_origin(text: str) -> str:
    """One --cors origin in the form a browser sends it, or ValueError saying what is wrong."""
    raw = text.strip()
    hint = (f"{raw!r} is not a web origin: write scheme://host[:port] (e.g. https://app.example or "
            "http://localhost:3000), or '*' for every web site")
    if raw.lower() == "null":
        raise ValueError("'null' is the origin of every sandboxed frame and file:// page, so it cannot be "
                         "allowed; serve that page from a real origin")
    try:
        parts = urllib.parse.urlsplit(raw.rstrip("/"))
        port = parts.port
    except ValueError:
        raise ValueError(hint) from None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if not _SCHEME.match(scheme) or not host or parts.path or parts.query or parts.fragment or "@" in parts.netloc \
            or "*" in raw:
        raise ValueError(hint)
    try:
        host = host.encode("idna").decode("ascii")   # a browser writes an IDN host in punycode
    except UnicodeError:
        raise ValueError(hint) from None
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + ("" if port is None or DEFAULT_PORTS.get(scheme) == port else f":{port}")


def parse_cors(text: str) -> Cors:
    """`--cors` value: '*' (every origin) or a comma-separated list of origins."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if items == ["*"]:
        return True
    if not items:
        raise ValueError("give an origin such as https://app.example, a comma-separated list, or '*'")
    if "*" in items:
        raise ValueError("'*' already allows every web site; give either '*' or a list of origins")
    return tuple(dict.fromkeys(parse_origin(t) for t in items))


@dataclass(frozen=True)
class ServeConfig:
    # the model and how to chat with it
    recipe: str | Path | None = None          # --recipe: a recipe name or .toml path
    recipe_data: Mapping[str, Any] | None = None   # a built file's recipe, decided at build time
    display_name: str | None = None           # --name, or the name given at build time
    system: str | None = None                 # --system: default system prompt
    reasoning_format: str = "auto"            # --reasoning-format (runtime/chat/reasoning.py REASONING_FORMATS)
    reasoning_budget: int | None = None       # --reasoning-budget; None = no limit
    base_model: bool | None = None            # decided at build time from the model's file name
    mmproj: Path | None = None                # --mmproj: the vision projector GGUF (images); None: text only
    # the engine
    ctx: int | None = None                    # --ctx; None = the recipe's, capped by the model (choose_n_ctx)
    parallel: int = MAX_NUM_SEQS              # --parallel
    gpu_layers: int | str = GPU_LAYERS        # --gpu-layers, parsed
    device: str | None = None                 # --device
    flash_attn: str = FLASH_ATTN              # --flash-attn
    max_waiting: int = MAX_WAITING            # --max-waiting
    threads: int | None = None                # --threads: llama.cpp threads (None: every core)
    rpc: tuple[str, ...] = ()                 # --rpc HOST:PORT,...: RPC workers that take layers (docs/SCALING.md)
    speculative: str = SPECULATIVE            # --speculative: auto | ngram | off
    trace_steps: str | None = None            # --trace-steps FILE: one JSON line per engine step
    target_gap_ms: int = TARGET_GAP_MS        # --target-gap-ms: a step's time while anyone decodes (0: off)
    # the server
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT                  # the next free one is taken if busy; 0 = any
    open_browser: bool = True
    api_key: str | None = None
    cors: Cors = False                        # --cors (parse_cors)
    mcp_config: Path | None = None            # --mcp-config FILE: MCP servers for the chat page's tools
    verbose: bool = False                     # --verbose: technical detail on the console (why no GPU)
    instance_key: str | None = None           # a built file's model key: a lock file while serving (server/lifecycle/instance.py)
