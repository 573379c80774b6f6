"""`llmpack` command line. Each subcommand's work lives in its own module; this file only
declares arguments (so `llmpack run` and a built executable accept exactly the same flags)."""
from __future__ import annotations

import argparse
import os
import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from llmpack import __version__
from llmpack.errors import LlmpackError
from llmpack.runtime.chat.reasoning import REASONING_FORMATS   # names only, no dependencies
from llmpack.runtime.engine import config as engine_defaults
from llmpack.runtime.server.config import DEFAULT_HOST, DEFAULT_PORT, ServeConfig, parse_cors   # plain, no server

RPC_PORT = 50052               # llama.cpp's rpc-server default (runtime/hardware/rpc.py DEFAULT_PORT)
LOCAL_RAY = "local"            # `--ray` with no address: a Ray started here for this process
DEFAULT_REPLICA_THREADS = 4    # `serve --ray` without --threads: llama.cpp threads (and Ray CPUs) per replica


def _flag_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
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


def _whole_number(least: int, flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise LlmpackError(f"{flag} must be at least {least}, not {value}")
        return value
    return _flag_type(parse, "whole number")


def _endpoints(text: str) -> tuple[str, ...]:
    from llmpack.runtime.hardware.rpc import parse_endpoints   # lazy: `llmpack build` never needs it

    return parse_endpoints(text)


def _replicas(text: str) -> int | None:
    """`--replicas N` or `auto` (None: Ray Serve's autoscaling)."""
    if text.strip().lower() == "auto":
        return None
    value = int(text)
    if value < 1:
        raise LlmpackError(f"--replicas must be at least 1 or auto, not {value}")
    return value


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Flags that shape how the model is served; recorded as defaults by `llmpack build`. Each is
    parsed here, once: a built file's recorded defaults go through the same types (set_defaults)."""
    p.add_argument("--recipe", help="recipe name (see `llmpack recipes`) or path to a recipe .toml")
    p.add_argument("--ctx", type=_whole_number(16, "--ctx"), default=None,
                   help="context size in tokens shared by all requests (default: recipe's, capped by the model)")
    p.add_argument("--parallel", type=_whole_number(1, "--parallel"), default=None,
                   help=f"max sequences decoded together (default {engine_defaults.MAX_NUM_SEQS})")
    p.add_argument("--gpu-layers", type=_flag_type(engine_defaults.parse_gpu_layers, "gpu layers"), default=None,
                   help="layers to offload to the GPU: N, all, auto (fit free GPU memory; default) or 0 (CPU only)")
    p.add_argument("--system", default=None, help="default system prompt for the chat page")
    p.add_argument("--mmproj", metavar="FILE", default=None,
                   help="the model's vision projector (an mmproj*.gguf published with it): the chat page and the API "
                        "then take images")


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
    p.add_argument("--cors", nargs="?", const="*", default=False, type=_flag_type(parse_cors, "origins"),
                   metavar="ORIGIN[,ORIGIN...]",
                   help="let pages of these web sites (e.g. https://app.example,http://localhost:3000) call this "
                        "server from a browser and read the answers; off by default: only the chat page itself and "
                        "tools that are not browsers (curl, SDKs) can. `--cors '*'`, or a bare --cors (not just before "
                        "the model file), lets EVERY web page you visit use this server (without --api-key: all it can do)")
    p.add_argument("--max-waiting", type=_whole_number(1, "--max-waiting"), default=engine_defaults.MAX_WAITING,
                   help="queued requests beyond which new ones get 503")
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default=engine_defaults.FLASH_ATTN,
                   help="llama.cpp flash attention (default auto: on wherever the backend supports it)")
    p.add_argument("--speculative", choices=list(engine_defaults.SPECULATIVE_MODES), default=engine_defaults.SPECULATIVE,
                   help="n-gram speculative decoding: auto (default: where it measures faster), ngram (always), off")
    p.add_argument("--trace-steps", type=_flag_type(_writable_file, "file"), default=None, metavar="FILE",
                   help="append one JSON line per engine step to FILE (what it held, where its time went); "
                        "sum it up with `python -m llmpack.runtime.engine.trace_summary FILE`")
    p.add_argument("--device", default=None, help="GPU to offload to: an id such as Vulkan1 (listed in /health), "
                   "cpu for none, or auto (default: the discrete GPU with the most free memory)")
    p.add_argument("--verbose", action="store_true",
                   help="technical details on the console: why no GPU is used, the CPU backend")
    p.add_argument("--threads", type=_whole_number(1, "--threads"), default=None,
                   help="llama.cpp threads (default: every core)")
    p.add_argument("--rpc", type=_flag_type(_endpoints, "HOST:PORT list"), default=(), metavar="HOST:PORT,...",
                   help="put the model's layers on llmpack RPC workers (`llmpack rpc-worker` or `chat.exe "
                        "--rpc-worker` on each machine); reach other PCs through an SSH tunnel: docs/SCALING.md")
    p.add_argument("--rpc-key-file", default=None, metavar="FILE",
                   help="the RPC workers' key (a worker prints where it keeps it; default: the one in llmpack's "
                        "data folder, which a worker on this computer made)")
    p.add_argument("--reasoning-format", choices=REASONING_FORMATS, default="auto",
                   help="how a reasoning model's thinking is told from its answer: auto (from the chat template; "
                        "default), none (leave it in the answer), think (<think> tags) or harmony (gpt-oss)")
    p.add_argument("--reasoning-budget", type=_whole_number(-1, "--reasoning-budget"), default=-1,
                   help="end a reasoning model's thinking after N tokens (0: no thinking; -1: no limit, the default)")


def add_worker_args(p: argparse.ArgumentParser, *, own_address: bool = True) -> None:
    """`llmpack rpc-worker` (and, without the address flags it already has, a built file's --rpc-worker)."""
    if own_address:
        p.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; anything else needs --insecure-bind)")
        p.add_argument("--port", type=int, default=RPC_PORT, help=f"port (default {RPC_PORT})")
        p.add_argument("--threads", type=_whole_number(1, "--threads"), default=None,
                       help="CPU threads when lending the processor (default: every core)")
        p.add_argument("--device", default=None, help="GPU to lend, e.g. Vulkan0 (default: every GPU; cpu: the processor)")
        p.add_argument("--rpc-key-file", default=None, metavar="FILE",
                       help="the key heads must prove (default: rpc-key in llmpack's data folder, made if missing)")
    p.add_argument("--mem", type=_whole_number(1, "--mem"), default=None, metavar="MB",
                   help="memory offered, in MiB (default: the device's free memory); llama.cpp gives each worker "
                        "layers in proportion to it")
    p.add_argument("--insecure-bind", action="store_true",
                   help="allow a --host other than 127.0.0.1: RPC has no password and no encryption, so anyone "
                        "who reaches the port can run code here; only on a network you fully trust")
    p.add_argument("--cache", action="store_true", help="keep the weights received on disk: the next load of the "
                   "same model sends only their hashes")


def serve_config(args: argparse.Namespace, *, display_name: str | None = None, recipe_data: Any = None,
                 base_model: bool | None = None) -> ServeConfig:
    """The one place the command line becomes the server's typed config (`llmpack run` and a built
    file, which adds what was decided at build time)."""
    set_ = {k: v for k, v in {"parallel": args.parallel, "gpu_layers": args.gpu_layers}.items() if v is not None}
    if getattr(args, "rpc_key_file", None):   # read where the workers are added (runtime/hardware/rpc_key.py)
        os.environ["LLMPACK_RPC_KEY_FILE"] = str(args.rpc_key_file)
    return ServeConfig(recipe=args.recipe, recipe_data=recipe_data, display_name=display_name, system=args.system,
                       base_model=base_model, ctx=args.ctx, device=args.device, flash_attn=args.flash_attn,
                       max_waiting=args.max_waiting, speculative=args.speculative, trace_steps=args.trace_steps,
                       host=args.host, port=args.port, open_browser=not args.no_browser,
                       api_key=api_key(args), cors=args.cors, verbose=args.verbose,
                       reasoning_format=args.reasoning_format,
                       reasoning_budget=None if args.reasoning_budget < 0 else args.reasoning_budget,
                       mmproj=Path(args.mmproj) if getattr(args, "mmproj", None) else None,
                       threads=args.threads, rpc=tuple(args.rpc or ()), **set_)


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


def cmd_run(args: argparse.Namespace) -> int:
    # lazy: the server (flask, waitress, llama.cpp) loads only for `llmpack run`
    from llmpack.runtime.model.gguf_check import validate_gguf
    from llmpack.runtime.server.lifecycle.serve import serve

    from llmpack.runtime.model.mmproj import beside_hint, check_mmproj

    path = Path(args.model)
    validate_gguf(path)   # a clear error before anything listens
    if args.mmproj:
        check_mmproj(args.mmproj)   # likewise for the projector: one line, not a llama.cpp log
        print(f"llmpack: images: using the vision projector {Path(args.mmproj).name}", flush=True)
    elif (hint := beside_hint(path)) is not None:
        print(f"llmpack: note: {hint}", flush=True)
    return serve(serve_config(args), lambda progress: path)


def model_file(path: Path):
    """A GGUF, or a built file whose model is stored uncompressed (read in place), as a ModelFile."""
    # lazy: the builder's manifest reader and the GGUF check, only for `serve`
    from llmpack.builder.packfile import read_manifest
    from llmpack.runtime.model.gguf_check import validate_gguf
    from llmpack.runtime.model.source import ModelFile

    try:
        m = read_manifest(path).model
    except LlmpackError:
        validate_gguf(path)
        return ModelFile(path)
    if m.location != "embedded" or m.compression != "none":
        raise LlmpackError(f"{path.name} keeps its model {'beside it' if m.location != 'embedded' else 'compressed'}; "
                           f"serve the .gguf itself (`{path.name} --extract-to DIR` writes it)")
    validate_gguf(path, m.offset, m.size)
    return ModelFile(path, m.offset, m.size, m.sha256)


def cmd_serve(args: argparse.Namespace) -> int:
    """`llmpack serve MODEL`: the API without opening a browser; with --ray, replicas on a Ray cluster."""
    if args.model is None and args.ray not in (None, LOCAL_RAY):   # `serve --ray MODEL`: argparse gave MODEL to --ray
        args.model, args.ray = args.ray, LOCAL_RAY
    if args.model is None:
        raise LlmpackError("which model? llmpack serve [--ray [ADDRESS]] MODEL")
    if args.ray is None:
        args.no_browser = True
        return cmd_run(args)
    if args.rpc:
        raise LlmpackError("--rpc and --ray do not go together: a Ray replica holds the whole model")
    from llmpack.runtime.scale.launch import RaySettings, serve_ray   # lazy: Ray, the optional extra

    threads = args.threads or DEFAULT_REPLICA_THREADS
    settings = RaySettings(address=None if args.ray == LOCAL_RAY else args.ray, replicas=args.replicas,
                           min_replicas=args.min_replicas, max_replicas=args.max_replicas, threads=threads,
                           host=args.host, port=args.port, router=args.router)
    return serve_ray(model_file(Path(args.model)), serve_config(args), settings)


def cmd_recipes(args: argparse.Namespace) -> int:
    from llmpack.runtime.chat.recipes import print_recipes   # lazy: jinja2 and the recipe files

    return print_recipes(as_json=args.json)


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("give one or more numbers, each at least 1")
    return values


def add_bench_args(p: argparse.ArgumentParser) -> None:
    """`llmpack bench` flags (declared here so `llmpack build` never imports the benchmark)."""
    p.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8080 (with or without /v1)")
    p.add_argument("--model", default=None, help="model name to send (default: the first one /v1/models lists)")
    p.add_argument("--api-key", default=None, help="sent as `Authorization: Bearer KEY`")
    p.add_argument("--workload", default="random,chat,long",
                   help="comma-separated: random (short distinct prompts), chat (shared system prompt), long")
    p.add_argument("--concurrency", type=int_list, default=[1, 16, 32], help="clients at once, e.g. 1,16,32")
    p.add_argument("--num-prompts", type=int, default=None,
                   help="requests per level (default: 2 x concurrency; the long workload: 3)")
    p.add_argument("--input-len", type=int, default=32, help="words in a random prompt (about tokens)")
    p.add_argument("--output-len", type=int, default=64, help="tokens each reply is asked for (greedy, ignore_eos)")
    p.add_argument("--system-len", type=int, default=280, help="words in the chat workload's shared system prompt")
    p.add_argument("--long-len", type=int, default=2000, help="words in the long workload's prompt")
    p.add_argument("--seed", type=int, default=0, help="prompts are random words from this seed")
    p.add_argument("--timeout", type=float, default=600, help="seconds one request may take")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="the server's step trace (`llmpack run --trace-steps FILE`, same machine): "
                        "after each run, sum up the steps it added")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _lazy(module: str, func: str) -> Callable[[argparse.Namespace], int | None]:
    """The subcommand's function, imported only when that subcommand runs: `llmpack build` never
    pays for the server, `llmpack inspect` never for the builder (tests/test_startup.py)."""
    def run(args: argparse.Namespace) -> int | None:
        return getattr(importlib.import_module(module), func)(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmpack", description="Pack a GGUF model into one double-clickable chat app.")
    parser.add_argument("--version", action="version", version=f"llmpack {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", help="show what a GGUF file (or built executable) holds and how much memory it needs")
    p.add_argument("model", help="a .gguf file or an executable made by `llmpack build`")
    p.add_argument("--ctx", type=int, default=None, help="context size for the KV estimate (default: trained context)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_lazy("llmpack.builder.inspect", "cmd_inspect"))

    p = sub.add_parser("recipes", help="list the built-in model-family recipes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_recipes)

    p = sub.add_parser("run", help="serve a GGUF model and open the chat page")
    p.add_argument("model", help="path to a .gguf file")
    add_model_args(p)
    add_serve_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("serve", help="serve a model's API without opening a browser; --ray: replicas on a Ray cluster")
    p.add_argument("model", nargs="?", help="a .gguf file, or a program made by `llmpack build` (read in place)")
    add_model_args(p)
    add_serve_args(p)
    p.add_argument("--ray", nargs="?", const=LOCAL_RAY, default=None, metavar="ADDRESS",
                   help="serve with Ray Serve replicas: a running cluster's ADDRESS (auto, HOST:6379), or none for a "
                        "Ray on this machine; needs pip install 'llmpack[ray]' (docs/SCALING.md)")
    p.add_argument("--replicas", type=_flag_type(_replicas, "replicas"), default=1,
                   help="--ray: replicas, N or auto (Ray Serve's autoscaling between --min-replicas and --max-replicas)")
    p.add_argument("--min-replicas", type=_whole_number(1, "--min-replicas"), default=1)
    p.add_argument("--max-replicas", type=_whole_number(1, "--max-replicas"), default=4)
    p.add_argument("--router", choices=["prefix", "pow2"], default="prefix",
                   help="--ray: prefix-cache affinity (default) or Ray's power of two choices")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("rpc-worker", help="lend this computer's GPU (or processor) to `llmpack --rpc` on another")
    add_worker_args(p)
    p.set_defaults(func=_lazy("llmpack.runtime.hardware.rpc", "cmd_rpc_worker"))

    p = sub.add_parser("build", help="pack a GGUF model into one executable")
    p.add_argument("model", help="path to a .gguf file")
    p.add_argument("-o", "--output", required=True, help="executable to write (add .exe for Windows)")
    p.add_argument("--name", default=None, help="display name shown on the chat page")
    add_model_args(p)
    p.add_argument("--target", choices=["native", "windows-x64"], default=None,
                   help="the computer the program is for (default: this one; an OUT ending in .exe means windows-x64)")
    p.add_argument("--stub", default=None, help="runtime stub to use (e.g. one made on Windows or with a GPU build)")
    p.add_argument("--sign-pfx", metavar="FILE", default=None,
                   help="Windows: sign the finished .exe with this PKCS#12 certificate (osslsigncode); "
                        "its password is read from LLMPACK_SIGN_PASSWORD")
    p.add_argument("--compress", choices=["auto", "zstd", "none"], default="none", help="compress the model (auto: only if it shrinks below 90%%)")
    p.add_argument("--sidecar", action="store_true", help="write a small executable plus the model file beside it")
    p.set_defaults(func=_lazy("llmpack.builder.build", "cmd_build"))

    p = sub.add_parser("stub", help="build (or show) the cached PyInstaller runtime stub")
    p.add_argument("--target", choices=["native", "windows-x64"], default="native",
                   help="native (this computer) or windows-x64 (made here on Linux with mingw and Wine)")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("-o", "--output", default=None, help="also copy the stub here")
    p.add_argument("--wheel", metavar="DIR", default=None,
                   help="also write it as the platform wheel llmpack-stub-<target> into DIR (for releases)")
    p.set_defaults(func=_lazy("llmpack.builder.stub", "cmd_stub"))

    p = sub.add_parser("bench", help="benchmark any OpenAI-compatible server (TTFT, TPOT, ITL, tok/s)")
    add_bench_args(p)
    p.set_defaults(func=_lazy("llmpack.bench.report", "cmd_bench"))

    p = sub.add_parser("demo", help="build the chat executable from the built-in demo model and launch it")
    p.add_argument("which", nargs="?", default="qwen", choices=["qwen", "gemma"],
                   help="qwen: Qwen2.5-Coder 0.5B Instruct, an assistant (default); "
                        "gemma: Gemma 3 270M, a small base model that continues text")
    p.add_argument("-o", "--output", default=None, help="where to write the executable (default ./qwen-chat or ./gemma-chat)")
    add_serve_args(p)
    p.set_defaults(func=_lazy("llmpack.builder.build", "cmd_demo"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc = args.func(args)
    except LlmpackError as exc:
        print(f"llmpack: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
