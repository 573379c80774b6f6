"""What a built llmpack executable runs: the entry script frozen into the runtime stub.

Double-click (no arguments): read the manifest at the end of this very file; if this model is
already being served by an earlier launch, open the browser on that one and exit
(runtime/server/lifecycle/instance.py); else start the server (the chat page opens in the browser), check
the model once (or unpack a compressed one) while the page shows progress, load it from this
file's own bytes, serve until Ctrl+C. Flags are those of `llmpack run` (without the model path)
plus ``--info``, ``--extract-to DIR``, ``--forget [--yes]`` (builder/forget.py) and
``--new-instance``; the defaults recorded by `llmpack build` apply unless a flag says otherwise.

A damaged or incomplete file is refused with one line and exit code 2, never a traceback. When
Windows opened a console just for this program (double-click), fatal errors wait for Enter so
the message can be read before the window closes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from llmpack.runtime.hardware import dll_search

dll_search.restrict()   # Windows, before any library loads: system DLLs from System32, never the download folder

from llmpack import __version__  # noqa: E402 - after the DLL search is safe
from llmpack.builder import extract, packfile
from llmpack.builder.mmproj import mmproj_source
from llmpack.errors import LlmpackError
from llmpack.progress import human_bytes
from llmpack.runtime.server.lifecycle.flags import (RPC_PORT, add_model_args, add_serve_args, add_worker_args,
                                                    serve_config)

SELFTEST_FLAG = "--llmpack-selftest"
FAILED_MODEL_GRACE_S = 30.0   # keep serving the error page this long when a browser was opened
# Flags whose value `llmpack build` records in the manifest as the built file's defaults.
BUILT_DEFAULTS = ("ctx", "parallel", "gpu_layers", "system")


def _frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def _self_path() -> Path:
    if _frozen():
        return Path(sys.executable).resolve()
    override = os.environ.get("LLMPACK_SELF")   # running the entry script unfrozen, for debugging
    if override:
        return Path(override).resolve()
    raise LlmpackError("this is llmpack's runtime entry point; it runs inside an executable made by "
                       "`llmpack build` (set LLMPACK_SELF=PATH to debug one unfrozen)")


def _restore_child_environment() -> None:
    """PyInstaller points LD_LIBRARY_PATH (Linux) at its own folder; programs we start (the
    browser via xdg-open) must see the user's original value instead."""
    if not _frozen() or os.name == "nt":
        return
    for var in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"):
        orig = os.environ.pop(var + "_ORIG", None)
        if orig is not None:
            os.environ[var] = orig
        else:
            os.environ.pop(var, None)


def _leave_terminal_process_group() -> None:
    """POSIX onefile: the bootloader parent forwards every signal it gets to us, so a terminal's
    Ctrl+C (sent to the whole foreground process group) would arrive twice, and the server takes
    a second Ctrl+C as "stop waiting" and cuts its shutdown short. In a process group of our own
    we get it once, from the parent; signals sent to the program's pid are forwarded as before."""
    if os.name == "nt" or not _frozen() or not hasattr(sys, "_MEIPASS"):
        return
    try:
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)
    except OSError:
        pass


def _started_by_double_click(argv: list[str]) -> bool:
    """Windows: no arguments and no other program shares our console (the PyInstaller onefile
    parent does: it counts as ours)."""
    if os.name != "nt" or argv:
        return False
    try:
        import ctypes   # lazy: Windows only

        buf = (ctypes.c_uint32 * 8)()
        n = ctypes.windll.kernel32.GetConsoleProcessList(buf, 8)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return False
    return 0 < n <= (2 if _frozen() else 1)


def _pause(argv: list[str]) -> None:
    if _started_by_double_click(argv):
        try:
            input("\nPress Enter to close this window.")
        except (EOFError, KeyboardInterrupt, OSError):
            pass


def build_parser(manifest=None) -> argparse.ArgumentParser:
    defaults = (manifest.defaults if manifest is not None else None) or {}
    name = defaults.get("name") or "this model"
    parser = argparse.ArgumentParser(
        prog=Path(sys.argv[0]).name or "llmpack-app",
        description=f"Chat with {name} in your browser; also an OpenAI-compatible server at /v1. "
                    "Made with llmpack; everything runs on this computer.",
        epilog="Built-in defaults (see --info) apply to every flag you do not pass.")
    parser.add_argument("--version", action="version", version=f"llmpack {__version__}")
    add_model_args(parser)
    add_serve_args(parser)
    # What was decided at build time is each flag's default, parsed by the same types as typed flags.
    parser.set_defaults(**{k: (str(v) if k == "gpu_layers" else v) for k, v in defaults.items()
                           if k in BUILT_DEFAULTS and v is not None})
    parser.add_argument("--name", default=None, help="display name shown on the chat page")
    parser.add_argument("--info", action="store_true", help="print what this program contains (JSON) and exit")
    parser.add_argument("--extract-to", metavar="DIR", default=None,
                        help="write the model to DIR/<sha256>.gguf (for other tools) and exit")
    parser.add_argument("--forget", action="store_true",
                        help="remove this program's unpacked model copy and its saved chats and settings, after asking")
    parser.add_argument("--yes", action="store_true", help="with --forget: remove without asking")
    parser.add_argument("--new-instance", action="store_true",
                        help="start another copy even when this chat is already running")
    worker = parser.add_argument_group("RPC worker", "lend this computer to `llmpack --rpc` elsewhere (docs/SCALING.md)")
    worker.add_argument("--rpc-worker", action="store_true",
                        help=f"serve this computer's GPU or processor as an RPC worker on --host (127.0.0.1) and "
                             f"--port ({RPC_PORT} unless given), instead of chatting")
    add_worker_args(worker, own_address=False)
    return parser


def built_config(args: argparse.Namespace, manifest):
    """The server's config: the flags (whose defaults are the build's), plus what only the build
    knows: the recipe, the display name and whether it is a base model (from the model's file name)."""
    name = args.name or (manifest.defaults or {}).get("name") or None
    config = serve_config(args, display_name=name, recipe_data=manifest.recipe or None,
                          base_model=manifest.extra.get("base_model"))
    # the model key (saved chats are kept by it too): a second launch finds this one by it
    key = None if getattr(args, "new_instance", False) else manifest.model.sha256[:10]
    return dataclasses.replace(config, instance_key=key)


def _stop_soon(delay: float) -> None:
    """Ask the running server to stop (as Ctrl+C would) after `delay` seconds."""
    def later() -> None:
        time.sleep(delay)
        try:
            signal.raise_signal(signal.SIGINT)
        except (AttributeError, OSError, ValueError):  # pragma: no cover
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=later, name="llmpack-stop", daemon=True).start()


def run(argv: list[str]) -> int:
    exe = _self_path()
    manifest, problem = None, None
    try:
        manifest = packfile.read_manifest(exe)
    except LlmpackError as exc:
        problem = exc
    args = build_parser(manifest).parse_args(argv)
    if problem is not None:
        if exe.name.lower().startswith("llmpack-stub"):
            raise LlmpackError(f"{exe.name} is llmpack's runtime stub, not a chat program; make one with "
                               "`llmpack build MODEL.gguf -o NAME`") from None
        raise problem
    if args.rpc_worker:   # this program lends its devices; its own model is not used
        from llmpack.runtime.hardware.rpc_worker import cmd_rpc_worker   # lazy: only for --rpc-worker

        if not any(a == "--port" or a.startswith("--port=") for a in argv):
            args.port = RPC_PORT
        return cmd_rpc_worker(args)
    if args.info:   # plus the disk a launch needs beyond this file ("disk": extract.DiskNeed)
        print(json.dumps({**manifest.to_dict(), "disk": extract.disk_need(manifest).to_dict()}, indent=2,
                         sort_keys=True))
        return 0
    if args.forget:
        from llmpack.builder.forget import forget   # lazy: only for --forget

        return forget(manifest, yes=args.yes)
    if args.extract_to:
        path = extract.extract_model(exe, manifest, Path(args.extract_to).expanduser(),
                                    progress=True if sys.stderr.isatty() else None)
        print(path)
        return 0

    # lazy: the server (flask, waitress, llama.cpp) loads only to serve, not for --info or --extract-to
    from llmpack.runtime.server.lifecycle import instance
    from llmpack.runtime.server.lifecycle.browser import open_redirect, runtime_dir
    from llmpack.runtime.server.lifecycle.prepare import Stopping
    from llmpack.runtime.server.lifecycle.serve import serve

    config = built_config(args, manifest)
    try:
        running = instance.find_running(runtime_dir(), config.instance_key) if config.instance_key else None
    except OSError:   # no private runtime folder: no lock either, so start
        running = None
    if running is not None:   # a second double-click: show the copy that runs (runtime/server/lifecycle/instance.py)
        if config.open_browser and running.redirect is not None:
            open_redirect(running.redirect)
        print(f"llmpack is already running this chat at {running.url}"
              f"{': opened it in your browser' if config.open_browser else ''} (--new-instance starts another copy).",
              flush=True)
        return 0
    failed: list[BaseException] = []

    def prepare_model(progress):
        phase = ["checking"]   # verifying the model once; "extracting" when a compressed one is unpacked

        def report(done: int, total: int) -> None:
            if progress(phase[0], done / total if total else 1.0) is False:
                raise Stopping("stopped while unpacking")   # the partial file is removed on the way out

        def unpacking(folder: Path, size: int) -> None:
            print(f"llmpack: first start: unpacking the model ({human_bytes(size)}) to {folder}; "
                  "this happens once.", flush=True)

        try:
            need = extract.disk_need(manifest)
            if need.how == "unpack" and not need.present:   # the page says where, also while another launch unpacks
                phase[0] = "extracting"
                progress("extracting", 0.0, {"path": str(need.path.parent), "bytes": need.bytes})
            src = extract.model_source(exe, manifest, progress=report, unpacking=unpacking)
            mmproj = None if args.mmproj else mmproj_source(exe, manifest, progress=report)   # --mmproj overrides
            return dataclasses.replace(src, mmproj=mmproj) if mmproj is not None else src
        except LlmpackError as exc:
            # The server shows this on the page and the console; then we stop (exit 2): a damaged
            # download will not get better by waiting. A browser gets time to show the message.
            failed.append(exc)
            _stop_soon(FAILED_MODEL_GRACE_S if config.open_browser else 0.2)
            raise

    _restore_child_environment()
    _leave_terminal_process_group()
    rc = serve(config, prepare_model)
    if failed:
        _pause(argv)
        return 2
    return rc


def selftest() -> int:
    """Used by `llmpack stub` right after building: everything a launch needs is in the bundle."""
    out: dict = {"ok": False}
    try:
        # lazy: the self-test imports everything a launch needs, only when the builder asks
        import llama_cpp
        import pypdfium2   # PDF attachments (runtime/documents/extract.py imports it on first use)
        import zstandard   # models built with --compress
        from llama_cpp import mtmd_cpp   # pictures (--mmproj): llama.cpp's mtmd library loads from the bundle
        from PIL import Image            # noqa: F401 - pictures, decoded in a sandboxed child (runtime/media/pictures.py)

        from llmpack.runtime.engine import engine  # noqa: F401
        from llmpack.runtime.chat.recipes import load_recipes
        from llmpack.runtime.server.lifecycle import serve  # noqa: F401
        from llmpack.runtime.server.app import webui_dir
        from llmpack.runtime.documents.index import fts5_available
        from llmpack.runtime.hardware.backends import load_backends

        backends = load_backends()   # from the bundle folder: fails here if a backend is missing
        llama_cpp.llama_backend_init()
        web = webui_dir()
        out.update(llmpack=__version__, llama_cpp=llama_cpp.__version__, zstd_backend=zstandard.backend,
                   pdfium=str(pypdfium2.PDFIUM_INFO),
                   system_info=llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
                   recipes=sorted(load_recipes()), webui=sorted(p.name for p in web.iterdir()),
                   frozen=_frozen(), cpu_variant=backends.cpu_variant, gpu_notes=backends.notes,
                   sqlite_fts5=fts5_available(),   # long documents are searched with FTS5 (documents/index.py)
                   mtmd=os.path.basename(mtmd_cpp._libmtmd._name))
        out["ok"] = (web / "index.html").is_file() and (web / "vendor" / "markdown-it.js").is_file() \
            and bool(out["recipes"]) and out["sqlite_fts5"]
    except Exception as exc:  # noqa: BLE001 - reported to the builder
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    return 0 if out["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [SELFTEST_FLAG]:
        return selftest()
    try:
        return run(argv)
    except LlmpackError as exc:
        print(f"llmpack: error: {exc}", file=sys.stderr, flush=True)
        _pause(argv)
        return 2
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except Exception:  # a bug, not a user error: show it in full
        traceback.print_exc()
        print("llmpack: internal error (above); please report it with the output of --info",
              file=sys.stderr, flush=True)
        _pause(argv)
        return 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--llmpack-extract-worker"]:   # sandbox.pool.WORKER_FLAG JOB MEMORY: a document or picture reader
        from llmpack.runtime.sandbox.pool import worker_main   # lazy: only in that child

        worker_main(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    if os.name == "nt":
        import multiprocessing   # lazy: Windows only

        multiprocessing.freeze_support()
    sys.exit(main())
