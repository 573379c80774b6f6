"""`llmpack build MODEL -o OUT` and `llmpack demo`.

build: validate the GGUF, decide its chat format once (explicit --recipe > template embedded in
the GGUF > recipe matched from its metadata), record that recipe and the serving defaults in
the manifest, and splice the model into the cached runtime stub (builder/splice.py). With the
stub cached this costs about one copy of the model.

demo: build ./qwen-chat (or ./gemma-chat with `llmpack demo gemma`) from a built-in demo model
(llmpack.demo_models; if missing or older than the stub or model) and run it in the foreground,
passing the serve flags through and Ctrl+C on to it.
"""
from __future__ import annotations

import argparse
import errno
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmpack import __version__, signals
from llmpack.builder import packfile, splice
from llmpack.builder.sign import check_signing, sign_exe
from llmpack.builder.splice import fits_windows, sidecar_name
from llmpack.builder.stub import get_stub, llama_cpp_version, resolve_target, stub_info
from llmpack.errors import LlmpackError
from llmpack.progress import human_bytes
from llmpack.runtime.chat.recipes import Recipe, resolve_chat
from llmpack.runtime.engine.config import parse_gpu_layers
from llmpack.runtime.model.base_model import is_base_model
from llmpack.runtime.model.context import choose_n_ctx
from llmpack.runtime.model.gguf_check import validate_gguf
from llmpack.runtime.model.mmproj import beside_hint, check_mmproj
from llmpack.runtime.model.model_info import FILE_TYPE_NAMES
from llmpack.runtime.model.naming import human_name


class BuildError(LlmpackError):
    """`llmpack build` cannot make the requested executable."""


@dataclass
class BuildResult:
    path: Path
    manifest: Any            # manifest.Manifest
    model_path: Path         # the .gguf written beside it with --sidecar, else the source model
    size: int                # bytes of `path` (plus the sidecar model, if any)
    seconds: float
    chat_source: str
    sidecar: bool


def recipe_dict(chat) -> dict:
    """The recipe a built executable stores: exactly the chat format `chat` resolved to, in the
    recipe (TOML) shape, so the executable never depends on the recipes that ship with it."""
    if chat.recipe is not None and chat.source == f"recipe:{chat.recipe.name}":
        data = chat.recipe.to_dict()
    else:  # the template embedded in the GGUF, with a matched recipe's defaults where they apply
        data = chat.recipe.to_dict() if chat.recipe is not None else {"name": "gguf", "match": {}}
        data.update(description=f"chat template embedded in the GGUF ({chat.reason})",
                    chat_template=chat.template, stop=list(chat.stop), eot_tokens=list(chat.eot_tokens),
                    system_role=bool(chat.supports_system), sampling=dict(chat.sampling))
        data.pop("context", None)
        data.pop("system", None)
        if chat.context:
            data["context"] = int(chat.context)
        if chat.system is not None:
            data["system"] = chat.system
    Recipe.from_dict(data, source="<build>")   # what the executable will do with it must work
    return data


def _stub_kind(stub: Path) -> str:
    with open(stub, "rb") as f:
        head = f.read(4)
    return "pe" if head[:2] == b"MZ" else "elf" if head == b"\x7fELF" else "other"


def _check_output(model: Path, out: Path, stub: Path, sidecar: bool) -> None:
    if out.is_dir():
        raise BuildError(f"{out} is a folder; pass the file to write, e.g. -o {out / model.stem}")
    if out.exists() and out.resolve() == model.resolve():
        raise BuildError(f"-o {out} would overwrite the model itself; choose another name")
    if sidecar:
        beside = out.parent / sidecar_name(out)
        if beside.exists() and beside.resolve() == model.resolve():
            return   # the model already sits where the sidecar goes: splice verifies it in place
    kind = _stub_kind(stub)
    if out.suffix.lower() == ".exe" and kind != "pe":
        raise BuildError(f"{out.name} is a Windows program name but the runtime stub {stub} is not a Windows "
                         "executable; leave out --stub (llmpack makes the Windows one), or pass --target native "
                         "and a name without .exe")
    if kind == "pe" and out.suffix.lower() != ".exe":
        print(f"llmpack: warning: {out.name} is a Windows program; name it {out.name}.exe so it can be "
              "double-clicked", file=sys.stderr)


def _target_name(out: Path, target: str | None) -> str:
    """--target, or windows-x64 for an OUT ending in .exe when this computer is not Windows."""
    if target:
        return target
    return "windows-x64" if out.suffix.lower() == ".exe" and os.name != "nt" else "native"


def _check_projector(model: Path, mmproj) -> Any:
    """--mmproj, checked (ProjectorInfo), or None; without one, a projector lying beside the model is
    named, never packed silently."""
    if mmproj is None:
        hint = beside_hint(model)
        if hint:
            print(f"llmpack: note: {hint}", file=sys.stderr)
        return None
    path = Path(mmproj).expanduser()
    if not path.is_file():
        raise BuildError(f"--mmproj {path}: no such file; pass the mmproj*.gguf published with the model")
    return check_mmproj(path)          # GGUFError: one line


def _must_go_beside(stub: Path, model: Path, out: Path, compress: str | None, extra_size: int = 0) -> bool:
    """A Windows program of 4 GiB or more does not start: such a model goes beside it, said once."""
    if _stub_kind(stub) != "pe" or compress not in (None, "none"):
        return False
    size = model.stat().st_size + extra_size
    if fits_windows(stub.stat().st_size, size):
        return False
    print(f"llmpack: {out.name} would be {human_bytes(stub.stat().st_size + size)}, and Windows does not start a "
          f"program of 4 GB or more: the model goes beside it as {sidecar_name(out)}. Send both files, in one folder.",
          file=sys.stderr, flush=True)
    return True


def build_executable(model, out, *, name: str | None = None, recipe: str | None = None, ctx: int | None = None,
                     parallel: int | None = None, gpu_layers: Any = None, system: str | None = None,
                     stub=None, compress: str = "none", sidecar: bool = False, target: str | None = None,
                     sign_pfx=None, progress: Any = "auto", mmproj=None) -> BuildResult:
    """Write `out` (and with sidecar=True, `<out stem>.gguf` beside it); see the module doc.
    `mmproj`: the model's vision projector, packed after it (builder/mmproj.py)."""
    started = time.monotonic()
    model, out = Path(model).expanduser(), Path(out).expanduser()
    projector = _check_projector(model, mmproj)
    if not model.is_file():
        raise BuildError(f"{model}: no such file; pass the path to a .gguf model")
    with open(model, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        try:
            packfile.read_manifest(model)
        except LlmpackError:
            pass
        else:
            raise BuildError(f"{model} is already a program made by llmpack; pass its .gguf model "
                             f"(get it back with `{model} --extract-to DIR`)")
    gpu_layers = None if gpu_layers is None else parse_gpu_layers(gpu_layers)   # the flag's own parser
    # The bounds-checked header is all a build needs (read_model_info's vocabulary scan would
    # cost more than the header on a 262k-token model, for figures the manifest does not use:
    # docs/BENCHMARKS.md, "GGUF header parse").
    header = validate_gguf(model)          # GGUFError: one line
    kv = header.kv
    model_name = kv.get("general.name") if isinstance(kv.get("general.name"), str) else None
    # The file name helps matching a recipe here; the program only sees <sha256>.gguf later.
    chat = resolve_chat(recipe, arch=header.architecture, name=[n for n in (model_name, model.stem) if n],
                        embedded_template=kv.get("tokenizer.chat_template"), bos_token="", eos_token="")
    if sign_pfx is not None:
        check_signing(Path(sign_pfx).expanduser())   # before minutes of work, not after
    stub_path = get_stub(stub, target=None if stub else resolve_target(_target_name(out, target)))
    sidecar = sidecar or _must_go_beside(stub_path, model, out, compress,
                                         projector.size if projector is not None else 0)
    _check_output(model, out, stub_path, sidecar)

    display = name or human_name(kv, model.stem)   # general.name may name the quantization it was made from
    ftype = kv.get("general.file_type")
    defaults = {"ctx": choose_n_ctx(ctx, chat.context, kv.get(f"{header.architecture}.context_length")),
                "parallel": parallel,
                "gpu_layers": None if gpu_layers is None else str(gpu_layers), "system": system,
                "name": display}
    sinfo = stub_info(stub_path)
    extra = {
        "recipe": recipe_dict(chat),
        "defaults": defaults,
        "llama_cpp_version": sinfo.get("llama_cpp_version") or (llama_cpp_version() if stub is None else None),
        "chat_format": {"source": chat.source, "reason": chat.reason},
        "source_model": {"file": model.name, "name": model_name, "architecture": header.architecture,
                         "parameters": sum(t.n_elements for t in header.tensors),
                         "file_type": FILE_TYPE_NAMES.get(ftype & ~1024) if isinstance(ftype, int) else None,
                         "context_length": kv.get(f"{header.architecture}.context_length")},
        "stub": {"key": sinfo.get("key"), "platform": sinfo.get("platform"), "python": sinfo.get("python")},
        "built_by": f"llmpack {__version__}",
        "base_model": is_base_model(kv, [model.stem]),   # --name is a label, not evidence
    }
    if progress == "auto":
        progress = sys.stderr.isatty()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if sidecar:
            if compress not in (None, "none"):
                print("llmpack: warning: --compress does not apply to --sidecar (the model file is kept as is)",
                      file=sys.stderr)
            manifest = splice.write_sidecar(stub_path, model, out, extra, progress=progress,
                                            mmproj=projector.path if projector is not None else None)
            model_out = out.parent / manifest.model.file
            size = out.stat().st_size + model_out.stat().st_size
        else:
            manifest = splice.write_packed(stub_path, model, out, extra, compress=compress or "none",
                                           progress=progress, mmproj=projector.path if projector is not None else None)
            model_out = model
            size = out.stat().st_size
    except OSError as exc:   # the partial output is already gone (splice writes a temporary file)
        raise _write_error(exc, out, model.stat().st_size + stub_path.stat().st_size) from None
    os.chmod(out, 0o755)
    if sign_pfx is not None:
        sign_exe(out, Path(sign_pfx).expanduser(), name=display)
    return BuildResult(path=out, manifest=manifest, model_path=model_out, size=size,
                       seconds=time.monotonic() - started, chat_source=chat.source, sidecar=sidecar)


def _write_error(exc: OSError, out: Path, need: int) -> BuildError:
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return BuildError(f"the disk filled up while writing {out} (about {human_bytes(need)} needed); "
                          "free some space or pass -o with a folder on another disk")
    return BuildError(f"cannot write {out}: {exc.strerror or type(exc).__name__} ({exc.filename or out}); "
                      "pass -o with a folder you can write to")


def run_hint(path: Path) -> str:
    """How to start `path` from a shell in the current folder."""
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
        shown = str(rel) if rel.parent != Path(".") else rel.name
    except ValueError:
        shown = str(path)
    if os.name == "nt":
        return f".\\{shown}" if os.sep not in shown and "/" not in shown else shown
    return shlex.quote(shown if "/" in shown else "./" + shown)


def report(result: BuildResult) -> None:
    m = result.manifest
    d = m.defaults or {}
    stored = m.model.stored_size
    print(f"wrote {result.path} ({human_bytes(result.path.stat().st_size)}) in {result.seconds:.1f} s")
    model_line = f"{d.get('name')}: {human_bytes(m.model.size)}"
    if m.model.compression == "zstd":
        # the one kind of build that cannot be read in place (builder/extract.py)
        model_line += (f", stored zstd-compressed as {human_bytes(stored)} (its first launch unpacks "
                       f"{human_bytes(m.model.size)} to the user's cache; --compress none is read in place)")
    print(f"  model      {model_line}, chat format {result.chat_source}, context {d.get('ctx')} tokens")
    if result.sidecar:
        print(f"  model file {result.model_path} (keep it next to the program)")
    proj = (m.extra or {}).get("mmproj")
    if proj:
        where = f"beside it as {proj['file']} (keep it next to the program)" if proj.get("file") else "packed inside"
        print(f"  images     vision projector ({human_bytes(proj['size'])}), {where}: the chat page and the API take "
              f"pictures")
    if result.path.suffix.lower() == ".exe" and os.name != "nt":
        print(f"  run it     on Windows: double-click {result.path.name} (opens the chat page; --help lists the "
              f"options); here: wine {run_hint(result.path)}")
    else:
        print(f"  run it     {run_hint(result.path)}    (opens the chat page; --help lists the options)")
    if (m.extra or {}).get("base_model"):
        print("  base model no chat template and no instruct/chat tag: it continues text rather than answering;\n"
              "             the chat page says so and offers a text-completion mode (an -it/Instruct model chats)")
    print("  API        OpenAI-compatible at http://127.0.0.1:8080/v1 while it runs (or the port it prints)")


def cmd_build(args: argparse.Namespace) -> int:
    result = build_executable(
        args.model, args.output, name=args.name, recipe=args.recipe, ctx=args.ctx, parallel=args.parallel,
        gpu_layers=args.gpu_layers, system=args.system, stub=args.stub, compress=args.compress,
        sidecar=args.sidecar, target=args.target, sign_pfx=args.sign_pfx, mmproj=getattr(args, "mmproj", None))
    report(result)
    return 0


# --------------------------------------------------------------------------- demo


def serve_flags(args: argparse.Namespace) -> list[str]:
    """The add_serve_args flags of `args`, as command-line arguments for a built executable."""
    flags = ["--host", str(args.host), "--port", str(args.port)]
    if getattr(args, "no_browser", False):
        flags.append("--no-browser")
    if getattr(args, "api_key", None):
        flags += ["--api-key", args.api_key]
    cors = getattr(args, "cors", False)
    if cors:
        flags += ["--cors", "*" if cors is True else ",".join(cors)]
    if getattr(args, "max_waiting", None) is not None:
        flags += ["--max-waiting", str(args.max_waiting)]
    return flags


def _needs_build(out: Path, stub: Path, model: Path) -> bool:
    if not out.exists():
        return True
    try:
        packfile.read_manifest(out)
    except LlmpackError:
        raise BuildError(f"{out} exists and is not a program made by llmpack; move it away or pass "
                         "-o with another name") from None
    return out.stat().st_mtime < max(stub.stat().st_mtime, model.stat().st_mtime)


def cmd_demo(args: argparse.Namespace) -> int:
    # lazy: demo_models imports importlib.metadata, a large share of start-up; only `llmpack demo` needs it
    from llmpack.demo_models import demo_model, demo_model_path

    demo = demo_model(args.which)
    model = demo_model_path(demo.key)
    out = Path(args.output).expanduser() if args.output else Path(demo.program + (".exe" if os.name == "nt" else ""))
    stub = get_stub()
    if _needs_build(out, stub, model):
        print(f"llmpack: building {out} from the demo model {demo.summary}", file=sys.stderr, flush=True)
        report(build_executable(model, out))
    else:
        print(f"llmpack: {out} is up to date", file=sys.stderr, flush=True)
    print(f"llmpack: starting {run_hint(out)} {' '.join(shlex.quote(f) for f in serve_flags(args))}",
          file=sys.stderr, flush=True)
    return run_child([str(out.resolve()), *serve_flags(args)])


def run_child(cmd: list[str]) -> int:
    """Run `cmd` in the foreground until it exits; Ctrl+C (and SIGTERM/SIGHUP) reach it exactly
    once and it decides how to stop. Returns its exit code (128+N if signal N killed it)."""
    kw: dict[str, Any] = {}
    if os.name != "nt":
        # its own process group: a terminal's Ctrl+C reaches only us, and we forward it once
        # (otherwise the program would get it from the terminal and from us)
        if sys.version_info >= (3, 11):
            kw["process_group"] = 0
        else:  # pragma: no cover
            kw["preexec_fn"] = os.setpgrp
    child = subprocess.Popen(cmd, **kw)

    def forward(signum: int, frame: Any) -> None:
        if os.name == "nt":
            return   # Windows delivers console Ctrl+C to every process on the console itself
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous = signals.install(forward, ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"))
    try:
        while True:
            try:
                rc = child.wait()
                break
            except KeyboardInterrupt:
                continue
    finally:
        signals.restore(previous)
    return 128 - rc if rc < 0 else rc
