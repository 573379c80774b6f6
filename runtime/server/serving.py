"""From a GGUF path and the `ServeConfig` to a `ServedModel`: the chat format (recipe, embedded
template or a matched family), the engine, and what the routes echo (id, aliases, fingerprint,
stop ids). The server launcher calls `build_model` on a background thread while the page shows
the loading progress."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Callable

from llmpack import __version__
from llmpack.errors import LlmpackError
from llmpack.runtime.chat.recipes import chat_format_for_model
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.engine import LLMEngine
from llmpack.runtime.model.context import choose_n_ctx
from llmpack.runtime.model.model_info import read_model_info
from llmpack.runtime.server.config import ServeConfig
from llmpack.runtime.server.state import ServedModel

# progress(phase, fraction) returns False once the server is stopping: the work gives up
Progress = Callable[[str, float], "bool | None"]


class Stopping(Exception):
    """Raised by a preparation step (unpacking the model) whose progress() said the server is
    stopping: the step is abandoned instead of finished."""


def _model_key(path: Path, name: str | None) -> str:
    """The model file's sha256 prefix for built executables, else a hash of its name and size:
    the same on every launch, whatever the llmpack version or port (saved chats are kept by it)."""
    stem = path.stem.lower()
    if re.fullmatch(r"[0-9a-f]{64}", stem):   # built executables extract to <sha256>.gguf
        return stem[:10]
    size = path.stat().st_size if path.exists() else 0
    return hashlib.sha256(f"{name}|{path.name}|{size}".encode()).hexdigest()[:10]


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


def build_model(path: Path, config: ServeConfig, *, progress: Progress | None = None,
                warn: Callable[[str], None] | None = None) -> ServedModel:
    """Read the GGUF, resolve the chat format, start the engine (blocking, llama.cpp drives
    progress("loading", f)), and describe the result for the routes."""
    info = read_model_info(path)
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
                       max_waiting=config.max_waiting, flash_attn=config.flash_attn, device=config.device)
    engine = LLMEngine(cfg, progress=(lambda f: progress("loading", f)) if progress else None, info=info)
    try:
        name = config.display_name or path.stem
        key = _model_key(path, info.name)
        stop = list(chat.stop) if chat else []
        return ServedModel(
            engine=engine, model_id=name, display_name=name, n_ctx=engine.n_ctx, chat=chat,
            system_prompt=config.system if config.system is not None else (chat.system if chat else None),
            sampling=dict(chat.sampling) if chat else {}, stop=stop,
            stop_token_ids=_special_stop_ids(engine, [*stop, *(chat.eot_tokens if chat else ())]),
            fingerprint=f"fp_llmpack-{__version__}-{key}", model_key=key, backend=engine.backend,
            aliases=frozenset(a.lower() for a in (name, path.name, path.stem, info.name) if a),
            meta={"n_ctx_train": info.context_length, "n_vocab": engine.n_vocab, "architecture": info.architecture,
                  "chat_format": chat.source if chat else None, "display_name": name,
                  "base_model": config.base_model if config.base_model is not None else info.base_model})
    except BaseException:
        engine.shutdown()
        raise
