"""`llmpack` command line. Each subcommand's work lives in its own module; this file only
declares arguments. The flags of serving a model are declared once, in
runtime/server/lifecycle/flags.py, so `llmpack run` and a built executable accept exactly the same
flags without the builder importing this file."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Callable, Sequence

from llmpack import __version__
from llmpack.errors import LlmpackError
from llmpack.runtime.server.lifecycle.flags import (add_model_args, add_serve_args, add_worker_args, flag_type,
                                                    serve_config, whole_number)

LOCAL_RAY = "local"            # `--ray` with no address: a Ray started here for this process


def _replicas(text: str) -> int | None:
    """`--replicas N` or `auto` (None: Ray Serve's autoscaling)."""
    if text.strip().lower() == "auto":
        return None
    value = int(text)
    if value < 1:
        raise LlmpackError(f"--replicas must be at least 1 or auto, not {value}")
    return value


def cmd_run(args: argparse.Namespace) -> int:
    # lazy: the server (flask, waitress, llama.cpp) loads only for `llmpack run`
    from llmpack.runtime.model.gguf_check import validate_gguf
    from llmpack.runtime.server.lifecycle.serve import serve

    from llmpack.runtime.model.mmproj import beside_hint, check_mmproj

    path = Path(args.model)
    validate_gguf(path)   # a clear error before anything listens
    if args.mmproj:
        proj = check_mmproj(args.mmproj)   # likewise for the projector: one line, not a llama.cpp log
        print(f"llmpack: {proj.reads}: using the projector {Path(args.mmproj).name}", flush=True)
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
    # lazy: Ray, the optional extra, and the server as scale runs it (scale/ imports nothing of the server)
    from llmpack.ray_server import SERVED
    from llmpack.runtime.scale.launch import RaySettings, serve_ray

    # --threads left out: as many as the nodes have, up to launch.DEFAULT_THREADS (launch.fit)
    settings = RaySettings(address=None if args.ray == LOCAL_RAY else args.ray, replicas=args.replicas,
                           min_replicas=args.min_replicas, max_replicas=args.max_replicas, threads=args.threads,
                           host=args.host, port=args.port, router=args.router)
    return serve_ray(model_file(Path(args.model)), serve_config(args), settings, SERVED)


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
    p.add_argument("--replicas", type=flag_type(_replicas, "replicas"), default=1,
                   help="--ray: replicas, N or auto (Ray Serve's autoscaling between --min-replicas and --max-replicas)")
    p.add_argument("--min-replicas", type=whole_number(1, "--min-replicas"), default=1)
    p.add_argument("--max-replicas", type=whole_number(1, "--max-replicas"), default=4)
    p.add_argument("--router", choices=["prefix", "pow2"], default="prefix",
                   help="--ray: prefix-cache affinity (default) or Ray's power of two choices")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("rpc-worker", help="lend this computer's GPU (or processor) to `llmpack --rpc` on another")
    add_worker_args(p)
    p.set_defaults(func=_lazy("llmpack.runtime.hardware.rpc_worker", "cmd_rpc_worker"))

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
