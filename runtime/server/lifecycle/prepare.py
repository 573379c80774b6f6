"""From a GGUF path and the `ServeConfig` to a `ServedModel`: the chat format (recipe, embedded
template or a matched family), the engine, and what the routes echo (id, aliases, fingerprint).
The recipe's defaults (sampling, stops, system prompt) are decided by core's `describe_model`, as
for the offline LLM. The server calls `build_model` on a background thread while the page shows
the loading progress."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Callable

from llmpack import __version__
from llmpack.errors import LlmpackError
from llmpack.progress import human_bytes
from llmpack.runtime.chat.recipes import chat_format_for_model
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.engine import LLMEngine
from llmpack.runtime.model.context import choose_n_ctx
from llmpack.runtime.model.model_info import read_model_info
from llmpack.runtime.model.naming import human_name
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.server.config import ServeConfig
from llmpack.runtime.core.files import AppFiles
from llmpack.runtime.core.served_model import ServedModel, describe_model

# progress(phase, fraction) returns False once the server is stopping: the work gives up
Progress = Callable[[str, float], "bool | None"]


class Stopping(Exception):
    """Raised by a preparation step (unpacking the model) whose progress() said the server is
    stopping: the step is abandoned instead of finished."""


# Shares of the "loading" bar. llama.cpp reports only its tensor loop, and with mmap (its default)
# that loop maps the weights rather than reading them: it ran from 0 to 100 % in 80 ms of a 2.7 s
# load of the 0.5B demo model, the page's 300 ms poll saw 0 % until "ready", and the disk reads
# were left to the first reply. So the bar covers every stage of the load, the longest being the
# one that really brings the model into memory: reading the file (into the page cache llama.cpp's
# mapping then uses), reported by the byte.
METADATA_DONE = 0.02          # the GGUF header and chat format, read in Python
READ_DONE = 0.80              # the file read through once
LLAMA_DONE = 0.95             # llama.cpp's own load (vocabulary, then its tensor loop); the rest
                              # (context and KV cache) ends with "ready"
READ_CHUNK = 16 << 20


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def read_into_memory(path: Path, report: Callable[[float], "bool | None"], offset: int = 0,
                     length: int | None = None) -> bool:
    """Read the model (path[offset:offset+length]: a built program's region when read in place)
    once from start to end, calling report(fraction) after each chunk; stops (Stopping) when
    report returns False. Skipped (False) for a model that would not stay in memory anyway (over
    80 % of this machine's RAM): then llama.cpp's mapping reads on demand."""
    size = length if length is not None else path.stat().st_size - offset
    ram = _physical_memory()
    if not size or (ram is not None and size > 0.8 * ram):
        return False
    done = 0
    buf = bytearray(READ_CHUNK)
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        while done < size and (n := f.readinto(memoryview(buf)[:min(READ_CHUNK, size - done)])):
            done += n
            if report(min(done / size, 1.0)) is False:
                raise Stopping("stopped while loading")
    return True


def model_key(path: Path, name: str | None, sha256: str | None = None) -> str:
    """The model file's sha256 prefix for built executables, else a hash of its name and size:
    the same on every launch, whatever the llmpack version or port (saved chats are kept by it)."""
    if sha256:   # a built program's model, loaded in place or unpacked
        return sha256[:10]
    stem = path.stem.lower()
    if re.fullmatch(r"[0-9a-f]{64}", stem):   # built executables extract to <sha256>.gguf
        return stem[:10]
    size = path.stat().st_size if path.exists() else 0
    return hashlib.sha256(f"{name}|{path.name}|{size}".encode()).hexdigest()[:10]


def _projector(src: ModelFile, config: ServeConfig) -> dict:
    """The engine's projector settings: the one a built program carries (a region of the program
    itself, or a file), else --mmproj's file, else none (text only)."""
    if src.mmproj is not None:
        return {"mmproj_path": str(src.mmproj.path), "mmproj_offset": src.mmproj.offset}
    return {"mmproj_path": str(config.mmproj) if config.mmproj else None}


def build_model(model: Path | ModelFile, config: ServeConfig, *, progress: Progress | None = None,
                warn: Callable[[str], None] | None = None, files: AppFiles | None = None) -> ServedModel:
    """Read the GGUF (a file, or a region of a built program), resolve the chat format, read it
    into memory, start the engine (blocking), and describe the result for the routes.
    progress("loading", f) moves through all of it (METADATA_DONE, READ_DONE, LLAMA_DONE);
    "ready" is the state's 100 %. `files`: the app's (ServerState.files), else the model's own."""
    def stage(start: float, end: float) -> Callable[[float], "bool | None"]:
        return lambda f: progress("loading", start + (end - start) * f) if progress else None

    src = model if isinstance(model, ModelFile) else ModelFile(Path(model))
    path = src.path
    stem = src.sha256 if src.in_place else path.stem   # in place, the path is the program's
    info = read_model_info(path, offset=src.offset, length=src.length)
    explicit = config.recipe
    try:
        chat = chat_format_for_model(info, str(explicit) if explicit else None, recipe_data=config.recipe_data)
    except LlmpackError as exc:
        if explicit:
            raise
        chat = None
        (warn or print)(f"llmpack: warning: {exc}; /v1/chat/completions is disabled, /v1/completions works")
    n_ctx = choose_n_ctx(config.ctx, chat.context if chat else None, info.context_length)
    cfg = EngineConfig(str(path), n_ctx=n_ctx, max_num_seqs=config.parallel, gpu_layers=config.gpu_layers,
                       max_waiting=config.max_waiting, flash_attn=config.flash_attn, device=config.device,
                       speculative=config.speculative, trace_steps=config.trace_steps,
                       target_gap_ms=config.target_gap_ms,
                       model_offset=src.offset, model_length=src.length, n_threads=config.threads, rpc=config.rpc,
                       **_projector(src, config))
    stage(0, METADATA_DONE)(1.0)
    if read_into_memory(path, stage(METADATA_DONE, READ_DONE), src.offset, src.length) and config.verbose:
        (warn or print)(f"llmpack: read the model file into memory ({human_bytes(src.length or path.stat().st_size)}); "
                        "llama.cpp loads it next")   # where a slow start goes
    engine = LLMEngine(cfg, progress=stage(READ_DONE, LLAMA_DONE) if progress else None, info=info)
    try:
        model_id = config.display_name or stem   # what API clients name it
        name = config.display_name or human_name(info.naming, stem)   # not general.name's "... AWQ"
        key = model_key(path, info.name, src.sha256)
        return describe_model(
            engine, chat, model_id=model_id, display_name=name, system=config.system,
            reasoning_format=config.reasoning_format, reasoning_budget=config.reasoning_budget,
            fingerprint=f"fp_llmpack-{__version__}-{key}", model_key=key, backend=engine.backend,
            files=files or AppFiles(),
            aliases=frozenset(a.lower() for a in (model_id, name, path.name, stem, info.name) if a),
            meta={"n_ctx_train": info.context_length, "n_vocab": engine.n_vocab, "architecture": info.architecture,
                  "chat_format": chat.source if chat else None, "display_name": name,
                  "parameters": info.parameters, "file_type": info.file_type, "size": info.length,
                  "base_model": config.base_model if config.base_model is not None else info.base_model})
    except BaseException:
        engine.shutdown()
        raise
