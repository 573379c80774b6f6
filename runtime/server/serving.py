"""From a GGUF path and the `run` flags to a `ServedModel`: the chat format (recipe, embedded
template or a matched family), the engine, and what the routes echo (id, aliases, fingerprint,
stop ids). The server launcher calls `build_model` on a background thread while the page shows
the loading progress."""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from llmpack import __version__
from llmpack.errors import LlmpackError
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.server.state import ServedModel

# progress(phase, fraction) returns False once the server is stopping: the work gives up
Progress = Callable[[str, float], "bool | None"]


class Stopping(Exception):
    """Raised by a preparation step (unpacking the model) whose progress() said the server is
    stopping: the step is abandoned instead of finished."""


def _model_key(path: Path, name: str | None, sha256: str | None = None) -> str:
    """The model file's sha256 prefix for built executables, else a hash of its name and size:
    the same on every launch, whatever the llmpack version or port (saved chats are kept by it)."""
    if sha256:   # a built program's model, loaded in place or unpacked
        return sha256[:10]
    stem = path.stem.lower()
    if re.fullmatch(r"[0-9a-f]{64}", stem):   # built executables extract to <sha256>.gguf
        return stem[:10]
    size = path.stat().st_size if path.exists() else 0
    return hashlib.sha256(f"{name}|{path.name}|{size}".encode()).hexdigest()[:10]


def _engine_kwargs(cfg_cls: type, **wanted: Any) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cfg_cls)}
    return {k: v for k, v in wanted.items() if k in names and v is not None}


def _gpu_layers(value: Any) -> int | str:
    if value is None:
        return "auto"
    return int(value) if isinstance(value, str) and value.strip().lstrip("-").isdigit() else value


def _special_stop_ids(engine: Any, texts: list[str]) -> list[int]:
    """Stop strings that are single special tokens (<end_of_turn>, <|im_end|>) also stop by id:
    their text may never appear in the output."""
    ids = []
    for text in texts:
        try:
            special = engine.tokenize(text, add_special=False, parse_special=True)
            plain = engine.tokenize(text, add_special=False, parse_special=False)
        except Exception:  # noqa: BLE001
            continue
        if len(special) == 1 and plain != special and special[0] not in ids:
            ids.append(special[0])
    return ids


def build_model(model: Path | ModelFile, args: argparse.Namespace, *, recipe: Any = None,
                display_name: str | None = None, progress: Progress | None = None,
                warn: Callable[[str], None] | None = None) -> ServedModel:
    """Read the GGUF (a file, or a region of a built program), resolve the chat format, start the
    engine (blocking, llama.cpp drives progress("loading", f)), and describe the result for the routes."""
    from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
    from llmpack.runtime.model.model_info import read_model_info
    from llmpack.runtime.chat.recipes import chat_format_for_model

    src = model if isinstance(model, ModelFile) else ModelFile(Path(model))
    path = src.path
    stem = src.sha256 if src.in_place else path.stem   # in place, the path is the program's
    info = read_model_info(path, offset=src.offset, length=src.length)
    explicit = recipe if isinstance(recipe, (str, os.PathLike)) else getattr(args, "recipe", None)
    try:
        chat = chat_format_for_model(info, str(explicit) if explicit else None,
                                     recipe_data=recipe if isinstance(recipe, Mapping) else None)
    except LlmpackError as exc:
        if explicit:
            raise
        chat = None
        (warn or print)(f"llmpack: warning: {exc}; /v1/chat/completions is disabled, /v1/completions works")
    trained = info.context_length or 4096
    decided = getattr(args, "base_model", None)   # a built file decided at build time, from the model's file name
    n_ctx = getattr(args, "ctx", None) or min((chat.context if chat else None) or 4096, trained)
    cfg = EngineConfig(str(path), **_engine_kwargs(
        EngineConfig, n_ctx=n_ctx, model_offset=src.offset, model_length=src.length,
        max_num_seqs=getattr(args, "parallel", None) or 32,
        gpu_layers=_gpu_layers(getattr(args, "gpu_layers", None)), max_waiting=getattr(args, "max_waiting", None),
        flash_attn=getattr(args, "flash_attn", None),
        device=getattr(args, "device", None)))
    engine = LLMEngine(cfg, progress=(lambda f: progress("loading", f)) if progress else None)
    try:
        name = display_name or stem
        key = _model_key(path, info.name, src.sha256)
        stop = list(chat.stop) if chat else []
        system = getattr(args, "system", None)
        model_id = display_name or stem
        return ServedModel(
            engine=engine, model_id=model_id, display_name=name, n_ctx=engine.n_ctx, chat=chat,
            system_prompt=system if system is not None else (chat.system if chat else None),
            sampling=dict(chat.sampling) if chat else {}, stop=stop,
            stop_token_ids=_special_stop_ids(engine, [*stop, *(chat.eot_tokens if chat else ())]),
            fingerprint=f"fp_llmpack-{__version__}-{key}", model_key=key, backend=engine.backend,
            aliases=frozenset(a.lower() for a in (model_id, name, path.name, stem, info.name) if a),
            meta={"n_ctx_train": info.context_length, "n_vocab": engine.n_vocab, "architecture": info.architecture,
                  "chat_format": chat.source if chat else None, "display_name": name,
                  "base_model": decided if isinstance(decided, bool) else info.base_model})
    except BaseException:
        engine.shutdown()
        raise
