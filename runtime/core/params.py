"""Sampling values from a request -> `SamplingParams`, with the model's recipe defaults, stop
strings and stop token ids applied in one place (the HTTP APIs and `LLM.chat` alike).

Every wire format reads its own field names (OpenAI's `max_completion_tokens`, Ollama's
`num_predict`, ...) into `SamplingValues`, the neutral names; each value is type-checked here
with the name the client sent, so a 400 always names the field at fault.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any, Callable

from llmpack.runtime.engine.sampling_params import (CHAT_MAX_TOKENS, COMPLETION_MAX_TOKENS, InvalidParameterError,
                                                   SamplingParams)
from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.served_model import ServedModel

INT64 = 2**63
FLOATS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
INTS = ("n", "top_k", "seed", "max_tokens")
_SAMPLING_FIELDS = {f.name for f in fields(SamplingParams)}


def show(value: Any) -> str:
    """A client's value, short enough for an error message."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=str) if not isinstance(value, float) else repr(value)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def number(param: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > 10**30 or not math.isfinite(value):
        raise bad(param, f"'{param}' must be a number, got {show(value)}")
    return float(value)


def integer(param: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(param, f"'{param}' must be an integer, got {show(value)}")
    if not -INT64 <= value < 2 * INT64:
        raise bad(param, f"'{param}' is out of range: {show(value)}")
    return value


def flag(param: str, value: Any) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise bad(param, f"'{param}' must be true or false, got {show(value)}")
    return value


def known_fields(body: Any, allowed: set[str], unknown: str, code: str | None = None,
                 not_object: str = "The request body must be a JSON object.", body_param: str | None = None,
                 unused: Callable[[str], None] | None = None) -> dict:
    """`body` when it is a JSON object whose every field the route knows; else a 400 naming the first
    field it does not (or `body_param`). Every API room checks its bodies here; `unknown` is the
    room's own wording of the refusal, a format string of `key`. `unused`: a room whose original
    skips unknown fields (Ollama) hands each to it instead of refusing."""
    if not isinstance(body, dict):
        raise bad(body_param, not_object)
    for key in body:
        if key not in allowed:
            if unused is None:
                raise bad(key, unknown.format(key=key), code)
            unused(str(key))
    return body


def is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def check_token_ids(ids: list[int], n_vocab: int, param: str) -> list[int]:
    """Token ids a client sent (prompts, embeddings input, detokenize): each must be in the vocabulary."""
    if any(not 0 <= t < n_vocab for t in ids):
        raise bad(param, f"token ids must be from 0 to {n_vocab - 1}")
    return list(ids)


def scrub(text: str) -> str:
    """Lone surrogates (valid JSON escapes, invalid UTF-8) would crash the tokenizer."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


@dataclass
class SamplingValues:
    """What a request asked of sampling, in neutral names; None = not asked (the recipe's
    default, then SamplingParams', applies). `names` maps a neutral name to the client's field
    name where they differ (for error messages)."""

    temperature: Any = None
    top_p: Any = None
    top_k: Any = None
    min_p: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    repetition_penalty: Any = None
    n: Any = None
    seed: Any = None
    max_tokens: Any = None
    stop: Any = None
    stop_token_ids: Any = None
    ignore_eos: Any = None
    include_stop_str_in_output: Any = None
    names: dict[str, str] | None = None

    def name(self, key: str) -> str:
        return (self.names or {}).get(key, key)


def _stops(value: Any, param: str, model_stop: list[str]) -> list[str]:
    """The client's stop strings (a string or a list of them on the wire) and the model's; how many
    and which may be there is SamplingParams' rule."""
    if value is None:
        stop: list[str] = []
    elif isinstance(value, str):
        stop = [value]
    elif not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad(param, f"'{param}' must be a string or a list of strings")
    else:
        stop = value
    return list(dict.fromkeys([*(scrub(s) for s in stop), *model_stop]))


def sampling_params(values: SamplingValues, model: ServedModel, *, chat: bool, logprobs: int | None = None,
                    grammar: str | None = None) -> SamplingParams:
    """The request's SamplingParams: recipe defaults, then what the request says. A chat also gets
    the model's stop strings and stop token ids (the turn's end, as its template writes it)."""
    kw: dict[str, Any] = {k: v for k, v in model.sampling.items() if k in _SAMPLING_FIELDS}
    for key in FLOATS:
        value = number(values.name(key), getattr(values, key))
        if value is not None:
            kw[key] = value
    for key in INTS:
        value = integer(values.name(key), getattr(values, key))
        if value is not None:
            kw[key] = value
    for key in ("ignore_eos", "include_stop_str_in_output"):
        value = flag(values.name(key), getattr(values, key))
        if value is not None:
            kw[key] = value
    if "max_tokens" not in kw:
        kw["max_tokens"] = CHAT_MAX_TOKENS if chat else COMPLETION_MAX_TOKENS
    if kw.get("seed") is not None:
        kw["seed"] %= 2**32   # the sampler seeds a 32-bit generator; any int64 the client sends is fine
    kw["stop"] = _stops(values.stop, values.name("stop"), model.stop if chat else [])
    ids = values.stop_token_ids
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise bad(values.name("stop_token_ids"), f"'{values.name('stop_token_ids')}' must be a list of token ids")
        kw["stop_token_ids"] = ids
    if chat:
        kw["stop_token_ids"] = [*kw.get("stop_token_ids", []), *model.stop_token_ids]
    kw["logprobs"] = logprobs
    kw["grammar"] = grammar
    try:
        return SamplingParams(**kw)
    except InvalidParameterError as exc:   # SamplingParams holds the ranges; the 400 names what the client sent
        name = values.name(exc.param)
        own = len(model.stop) if chat and exc.param == "stop" and model.stop else 0
        raise bad(name, f"'{name}' {exc.reason}" + (f" (the model's own {own} included)" if own else "")) from None
    except (TypeError, ValueError) as exc:
        raise bad(None, f"invalid sampling parameters: {exc}") from None
