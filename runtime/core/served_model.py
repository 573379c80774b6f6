"""What the core knows about the one model it serves: the engine (through `EngineClient`, the
only door to it), the chat format, and the defaults every chat request gets from the recipe.

`describe_model` is the one place those defaults are decided, for the HTTP server
(lifecycle/prepare.py) and the offline `LLM` (runtime/llm.py) alike: the recipe's sampling
values, its stop strings, the default system prompt, and the stop strings that are single
special tokens, which also stop by id (their text may never appear in the output).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

from llmpack.runtime.chat.reasoning import ReasoningSyntax, syntax_for_template
from llmpack.runtime.chat.recipes import ChatFormat
from llmpack.runtime.core.files import AppFiles
from llmpack.runtime.engine.client import EngineClient
from llmpack.runtime.engine.sampling_params import CHAT_MAX_TOKENS, CONTINUE_MAX_TOKENS, SamplingParams


@dataclass
class ServedModel:
    """Everything the routes need about the one model being served."""

    engine: EngineClient
    model_id: str                     # what /v1/models lists and responses echo
    display_name: str
    n_ctx: int
    chat: ChatFormat | None = None    # None when no chat format could be resolved (completions only)
    system_prompt: str | None = None  # default system prompt (--system, else the recipe's)
    sampling: dict[str, float] = field(default_factory=dict)   # default sampling values (recipe)
    stop: list[str] = field(default_factory=list)               # stop strings every chat request gets
    stop_token_ids: list[int] = field(default_factory=list)     # the same, as single special tokens
    fingerprint: str = "fp_llmpack"
    model_key: str = "llmpack"        # saved chats and settings belong to it (lifecycle/prepare.model_key)
    aliases: frozenset[str] = frozenset()   # names a request's "model" may use (lowercase)
    meta: dict[str, Any] = field(default_factory=dict)
    backend: dict | None = None       # where the model runs (CPU variant, GPU, layers): /health's "backend"
    reasoning: ReasoningSyntax | None = None   # how its thinking is marked; None: it does not think (or --reasoning-format none)
    reasoning_budget: int | None = None        # --reasoning-budget: thinking tokens before thinking is ended; None: no limit
    created: int = field(default_factory=lambda: int(time.time()))
    # the app's documents index, sandbox and caches (core/files.py): whoever serves the model owns
    # and closes them (the server's state, the LLM); a model described without them gets its own
    files: AppFiles = field(default_factory=AppFiles, repr=False)

    @property
    def bos_prefix(self) -> list[int]:
        """The ids the tokenizer puts in front of a prompt (the engine knows)."""
        return self.engine.bos_prefix


def special_stop_ids(engine: EngineClient, texts: list[str]) -> list[int]:
    """The stop strings that are one special token (<end_of_turn>, <|im_end|>), as ids."""
    ids: list[int] = []
    for text in texts:
        try:
            special = engine.tokenize(text, add_special=False, parse_special=True)
            plain = engine.tokenize(text, add_special=False, parse_special=False)
        except Exception:  # noqa: BLE001 - a stop string the tokenizer refuses stops by text only
            continue
        if len(special) == 1 and plain != special and special[0] not in ids:
            ids.append(special[0])
    return ids


def describe_model(engine: EngineClient, chat: ChatFormat | None, *, model_id: str, display_name: str,
                   system: str | None = None, reasoning_format: str = "auto", **extra: Any) -> ServedModel:
    """The ServedModel for `engine` with `chat`'s defaults. `system`: the operator's default system
    prompt (--system), which wins over the recipe's; `reasoning_format` (--reasoning-format): how
    the thinking is told from the answer, "auto" reading it from the template; `extra`: the
    ServedModel fields a server adds (fingerprint, model_key, aliases, meta, backend, reasoning_budget,
    files)."""
    stop = list(chat.stop) if chat else []
    return ServedModel(
        engine=engine, model_id=model_id, display_name=display_name, n_ctx=engine.n_ctx, chat=chat,
        system_prompt=system if system is not None else (chat.system if chat else None),
        sampling=dict(chat.sampling) if chat else {}, stop=stop,
        stop_token_ids=special_stop_ids(engine, [*stop, *(chat.eot_tokens if chat else ())]),
        reasoning=syntax_for_template(chat.template, reasoning_format) if chat else None, **extra)


PAGE_SAMPLING = ("temperature", "top_p", "top_k", "min_p")   # what the page's Settings show


def request_defaults(model: ServedModel) -> dict[str, Any]:
    """The values a chat request that names none of them is served with (SamplingParams' own,
    then the model's recipe), as /health tells the chat page, which shows them in Settings; and
    how much the page's text-completion mode asks for per "continue"."""
    base = {f.name: f.default for f in fields(SamplingParams) if f.name in PAGE_SAMPLING}
    base.update({k: v for k, v in model.sampling.items() if k in PAGE_SAMPLING})
    return {**base, "max_tokens": CHAT_MAX_TOKENS, "completion_max_tokens": CONTINUE_MAX_TOKENS}
