"""The flags of serving a model, and how they become the server's `ServeConfig`: `llmpack run` /
`serve` (llmpack/cli.py) and a built program (builder/stub_entry.py) accept exactly the same flags
because both declare them here. Both import this module, and it imports neither, so the command
line and the builder depend on the runtime one way. Light on purpose: `llmpack inspect` loads it.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Callable

from llmpack.errors import LlmpackError
from llmpack.runtime.chat.reasoning import REASONING_FORMATS   # names only, no dependencies
from llmpack.runtime.engine import config as engine_defaults
from llmpack.runtime.hardware import rpc_key   # the key file's variable name, stdlib only
from llmpack.runtime.server.config import DEFAULT_HOST, DEFAULT_PORT, ServeConfig, parse_cors   # plain, no server
from llmpack.runtime.tools.mcp_config import load_config   # plain JSON checks, no MCP SDK

RPC_PORT = 50052               # llama.cpp's rpc-server default (runtime/hardware/rpc.py DEFAULT_PORT)


def flag_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type from a parser that raises LlmpackError: argparse then prints usage + error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except (LlmpackError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = name
    return convert


def _writable_file(text: str) -> str:
    """A file we can append to, checked now: a wrong path is one clear line, not a failed load later."""
    try:
        with open(text, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise LlmpackError(f"cannot write to {text}: {exc.strerror}; give a file in a folder that exists") from None
    return text


def whole_number(least: int, flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise LlmpackError(f"{flag} must be at least {least}, not {value}")
        return value
    return flag_type(parse, "whole number")


def _endpoints(text: str) -> tuple[str, ...]:
    from llmpack.runtime.hardware.rpc import parse_endpoints   # lazy: `llmpack build` never needs it

    return parse_endpoints(text)


def _mcp_config(text: str) -> Path:
    """--mcp-config: the file, checked now (one line naming the field) rather than when the page asks."""
    load_config(text)
    return Path(text).expanduser().resolve()


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Flags that shape how the model is served; recorded as defaults by `llmpack build`. Each is
    parsed here, once: a built file's recorded defaults go through the same types (set_defaults)."""
    p.add_argument("--recipe", help="recipe name (see `llmpack recipes`) or path to a recipe .toml")
    p.add_argument("--ctx", type=whole_number(16, "--ctx"), default=None,
                   help="context size in tokens shared by all requests (default: recipe's, capped by the model)")
    p.add_argument("--parallel", type=whole_number(1, "--parallel"), default=None,
                   help=f"max sequences decoded together (default {engine_defaults.MAX_NUM_SEQS})")
    p.add_argument("--gpu-layers", type=flag_type(engine_defaults.parse_gpu_layers, "gpu layers"), default=None,
                   help="layers to offload to the GPU: N, all, auto (fit free GPU memory; default) or 0 (CPU only)")
    p.add_argument("--system", default=None, help="default system prompt for the chat page")
    p.add_argument("--mmproj", metavar="FILE", default=None,
                   help="the model's projector (an mmproj*.gguf published with it): the chat page and the API "
                        "then take images, sound or both, as the projector reads them")


def add_serve_args(p: argparse.ArgumentParser) -> None:
    """Flags of the server itself; the same for `llmpack run` and a built executable."""
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}; anything else exposes the model to your network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}, next free one if busy; 0 = any free port)")
    p.add_argument("--no-browser", action="store_true", help="do not open the chat page in a browser")
    p.add_argument("--api-key", default=None, help="require this key as `Authorization: Bearer KEY` on /v1 routes "
                   "(other users can read a command line: prefer --api-key-file or LLMPACK_API_KEY)")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="read the API key from the first line of FILE (keep it readable by you only)")
    p.add_argument("--cors", nargs="?", const="*", default=False, type=flag_type(parse_cors, "origins"),
                   metavar="ORIGIN[,ORIGIN...]",
                   help="let pages of these web sites (e.g. https://app.example,http://localhost:3000) call this "
                        "server from a browser and read the answers; off by default: only the chat page itself and "
                        "tools that are not browsers (curl, SDKs) can. `--cors '*'`, or a bare --cors (not just before "
                        "the model file), lets EVERY web page you visit use this server (without --api-key: all it can do)")
    p.add_argument("--max-waiting", type=whole_number(1, "--max-waiting"), default=engine_defaults.MAX_WAITING,
                   help="queued requests beyond which new ones get 503")
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default=engine_defaults.FLASH_ATTN,
                   help="llama.cpp flash attention (default auto: on wherever the backend supports it)")
    p.add_argument("--speculative", choices=list(engine_defaults.SPECULATIVE_MODES), default=engine_defaults.SPECULATIVE,
                   help="n-gram speculative decoding: auto (default: where it measures faster), ngram (always), off")
    p.add_argument("--target-gap-ms", type=whole_number(0, "--target-gap-ms"), default=engine_defaults.TARGET_GAP_MS,
                   metavar="MS", help="while anyone's reply streams, keep each step near this many milliseconds by "
                   f"reading others' prompts in pieces (default {engine_defaults.TARGET_GAP_MS}; 0: off)")
    p.add_argument("--trace-steps", type=flag_type(_writable_file, "file"), default=None, metavar="FILE",
                   help="append one JSON line per engine step to FILE (what it held, where its time went); "
                        "sum it up with `python -m llmpack.runtime.engine.trace_summary FILE`")
    p.add_argument("--device", default=None, help="GPU to offload to: an id such as Vulkan1 (listed in /health), "
                   "cpu for none, or auto (default: the discrete GPU with the most free memory)")
    p.add_argument("--verbose", action="store_true",
                   help="technical details on the console: why no GPU is used, the CPU backend")
    p.add_argument("--threads", type=whole_number(1, "--threads"), default=None,
                   help="llama.cpp threads (default: every core; with --ray, per replica: as many as a node has, "
                        "up to 4)")
    p.add_argument("--rpc", type=flag_type(_endpoints, "HOST:PORT list"), default=(), metavar="HOST:PORT,...",
                   help="put the model's layers on llmpack RPC workers (`llmpack rpc-worker` or `chat.exe "
                        "--rpc-worker` on each machine); reach other PCs through an SSH tunnel: docs/SCALING.md")
    p.add_argument("--rpc-key-file", default=None, metavar="FILE",
                   help="the RPC workers' key (a worker prints where it keeps it; default: the one in llmpack's "
                        "data folder, which a worker on this computer made)")
    p.add_argument("--reasoning-format", choices=REASONING_FORMATS, default="auto",
                   help="how a reasoning model's thinking is told from its answer: auto (from the chat template; "
                        "default), none (leave it in the answer), think (<think> tags) or harmony (gpt-oss)")
    p.add_argument("--mcp-config", type=flag_type(_mcp_config, "MCP configuration"), default=None, metavar="FILE",
                   help="MCP servers whose tools the chat page may use (each call asks you first): a JSON file "
                        "with \"mcpServers\", as Claude Desktop's (programs: command/args/env; or url/headers)")
    p.add_argument("--reasoning-budget", type=whole_number(-1, "--reasoning-budget"), default=-1,
                   help="end a reasoning model's thinking after N tokens (0: no thinking; -1: no limit, the default)")


def add_worker_args(p: argparse.ArgumentParser, *, own_address: bool = True) -> None:
    """`llmpack rpc-worker` (and, without the address flags it already has, a built file's --rpc-worker)."""
    if own_address:
        p.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; anything else needs --insecure-bind)")
        p.add_argument("--port", type=int, default=RPC_PORT, help=f"port (default {RPC_PORT})")
        p.add_argument("--threads", type=whole_number(1, "--threads"), default=None,
                       help="CPU threads when lending the processor (default: every core)")
        p.add_argument("--device", default=None, help="GPU to lend, e.g. Vulkan0 (default: every GPU; cpu: the processor)")
        p.add_argument("--rpc-key-file", default=None, metavar="FILE",
                       help="the key heads must prove (default: rpc-key in llmpack's data folder, made if missing)")
    p.add_argument("--mem", type=whole_number(1, "--mem"), default=None, metavar="MB",
                   help="memory offered, in MiB (default: the device's free memory); llama.cpp gives each worker "
                        "layers in proportion to it")
    p.add_argument("--insecure-bind", action="store_true",
                   help="allow a --host other than 127.0.0.1: the key keeps strangers out, but the traffic is not "
                        "encrypted, so anyone on the way reads every prompt; only on a network you fully trust "
                        "(else an SSH tunnel: docs/SCALING.md)")
    p.add_argument("--cache", action="store_true", help="keep the weights received on disk: the next load of the "
                   "same model sends only their hashes")


def serve_config(args: argparse.Namespace, *, display_name: str | None = None, recipe_data: Any = None,
                 base_model: bool | None = None) -> ServeConfig:
    """The one place the command line becomes the server's typed config (`llmpack run` and a built
    file, which adds what was decided at build time)."""
    set_ = {k: v for k, v in {"parallel": args.parallel, "gpu_layers": args.gpu_layers}.items() if v is not None}
    if getattr(args, "rpc_key_file", None):   # read where the workers are added (runtime/hardware/rpc_key.py)
        os.environ[rpc_key.KEY_FILE_ENV] = str(args.rpc_key_file)
    return ServeConfig(recipe=args.recipe, recipe_data=recipe_data, display_name=display_name, system=args.system,
                       base_model=base_model, ctx=args.ctx, device=args.device, flash_attn=args.flash_attn,
                       max_waiting=args.max_waiting, speculative=args.speculative, trace_steps=args.trace_steps,
                       target_gap_ms=args.target_gap_ms,
                       host=args.host, port=args.port, open_browser=not args.no_browser,
                       api_key=api_key(args), cors=args.cors, verbose=args.verbose,
                       reasoning_format=args.reasoning_format,
                       reasoning_budget=None if args.reasoning_budget < 0 else args.reasoning_budget,
                       mmproj=Path(args.mmproj) if getattr(args, "mmproj", None) else None,
                       threads=args.threads, rpc=tuple(args.rpc or ()),
                       mcp_config=getattr(args, "mcp_config", None), **set_)


def api_key(args: argparse.Namespace) -> str | None:
    """The server's API key: --api-key, else the first line of --api-key-file, else
    $LLMPACK_API_KEY, else none. A key on the command line is visible to every user of the
    computer (/proc/*/cmdline, Task Manager); a file or the environment is not."""
    if getattr(args, "api_key", None):
        return args.api_key
    path = getattr(args, "api_key_file", None)
    if path:
        try:
            key = Path(path).read_text("utf-8").splitlines()[0].strip() if Path(path).stat().st_size else ""
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise LlmpackError(f"cannot read the API key from {path} ({getattr(exc, 'strerror', None) or exc}); "
                               "put the key on its first line") from None
        if not key:
            raise LlmpackError(f"{path} holds no API key; put the key on its first line")
        return key
    return os.environ.get("LLMPACK_API_KEY", "").strip() or None
