"""OpenAI request parsing -> (prompt token ids, SamplingParams), and the response shapes.

Everything a client sends is checked here, before the engine sees it: unknown parameters,
wrong types and out-of-range values become `ApiError(400, ...)` naming the parameter.
"""
from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass, field, fields
from typing import Any

from llmpack.runtime.engine.outputs import TokenLogprob
from llmpack.runtime.engine.sampling_params import (CHAT_MAX_TOKENS, COMPLETION_MAX_TOKENS, InvalidParameterError,
                                                   SamplingParams)
from llmpack.runtime.server.api_error import bad
from llmpack.runtime.server.state import ServedModel
from llmpack.runtime.server.structured import output_plan, render_messages

INT64 = 2**63
MAX_CHOICES = 128


# ---------------------------------------------------------------- parameters
_FLOATS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
_INTS = ("n", "top_k", "seed", "max_tokens", "max_completion_tokens", "top_logprobs", "best_of")
_BOOLS = ("stream", "ignore_eos", "echo", "parallel_tool_calls", "store", "include_stop_str_in_output",
          "return_progress")
_COMMON = {"model", "stream", "stream_options", "return_progress", "n", "stop", "max_tokens", "seed", "user", "logit_bias",
           "ignore_eos", "stop_token_ids", "include_stop_str_in_output", "metadata", "store",
           "service_tier", *_FLOATS, "top_k"}
_SHAPE = {"response_format", "grammar", "json_schema"}   # constrained output (see structured.py)
CHAT_KEYS = _COMMON | _SHAPE | {"messages", "max_completion_tokens", "logprobs", "top_logprobs",
                                "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"}
COMPLETION_KEYS = _COMMON | _SHAPE | {"prompt", "logprobs", "echo", "suffix", "best_of"}
_SAMPLING_FIELDS = {f.name for f in fields(SamplingParams)}

def _check_type(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > 10**30 \
                or not math.isfinite(value):
            raise bad(name, f"'{name}' must be a number, got {_show(value)}")
        return float(value)
    if name in _INTS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(name, f"'{name}' must be an integer, got {_show(value)}")
        if not -INT64 <= value < 2 * INT64:
            raise bad(name, f"'{name}' is out of range: {_show(value)}")
        return value
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise bad(name, f"'{name}' must be true or false, got {_show(value)}")
        return value
    return value


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True, default=str) if not isinstance(value, float) else repr(value)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _get(body: dict, name: str) -> Any:
    return _check_type(name, body.get(name))


def check_keys(body: Any, allowed: set[str]) -> dict:
    if not isinstance(body, dict):
        raise bad(None, "The request body must be a JSON object.")
    for key in body:
        if key not in allowed:
            raise bad(key, f"Unrecognized request argument supplied: {key}", "unknown_parameter")
    return body


def _unsupported(body: dict) -> None:
    """Parameters OpenAI clients send that are fine when empty/default, refused otherwise."""
    lb = body.get("logit_bias")
    if lb is not None and (not isinstance(lb, dict) or lb):
        raise bad("logit_bias", "'logit_bias' is not supported by this server.", "unsupported_parameter")
    if body.get("suffix") is not None:
        raise bad("suffix", "'suffix' (insertion) is not supported by this server.", "unsupported_parameter")
    if _get(body, "echo"):
        raise bad("echo", "'echo' is not supported by this server.", "unsupported_parameter")
    for key in ("user", "service_tier"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise bad(key, f"'{key}' must be a string")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise bad("metadata", "'metadata' must be an object")
    for key in ("parallel_tool_calls", "store"):
        _get(body, key)


def stream_flags(body: dict) -> tuple[bool, bool]:
    stream = bool(_get(body, "stream"))
    opts = body.get("stream_options")
    if opts is None:
        return stream, False
    if not isinstance(opts, dict) or any(k not in ("include_usage", "continuous_usage_stats") for k in opts):
        raise bad("stream_options", "'stream_options' must be an object like {\"include_usage\": true}")
    usage = opts.get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise bad("stream_options", "'stream_options.include_usage' must be true or false")
    if not stream:
        raise bad("stream_options", "'stream_options' is only allowed when 'stream' is true")
    return stream, bool(usage)


def _stop(body: dict, model_stop: list[str]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad("stop", "'stop' must be a string or a list of strings")
    if any(not s for s in stop):
        raise bad("stop", "'stop' strings must not be empty")
    room = 16 - len(model_stop)
    if len(stop) > room:
        raise bad("stop", f"'stop' may hold at most {room} strings")
    out: list[str] = []
    for s in [*(scrub(s) for s in stop), *model_stop]:
        if s not in out:
            out.append(s)
    return out


def sampling_params(body: dict, model: ServedModel, *, chat: bool, logprobs: int | None,
                    grammar: str | None = None) -> SamplingParams:
    kw: dict[str, Any] = {k: v for k, v in model.sampling.items() if k in _SAMPLING_FIELDS}
    for name in (*_FLOATS, "n", "top_k", "seed", "ignore_eos", "include_stop_str_in_output"):
        value = _get(body, name)
        if value is not None:
            kw[name] = value
    length_key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _get(body, length_key)
    kw["max_tokens"] = max_tokens if max_tokens is not None else (CHAT_MAX_TOKENS if chat else COMPLETION_MAX_TOKENS)
    best_of = _get(body, "best_of")
    if best_of is not None and best_of != kw.get("n", 1):
        raise bad("best_of", "'best_of' is not supported (it may only equal n)", "unsupported_parameter")
    if kw.get("seed") is not None:
        kw["seed"] %= 2**32   # the sampler seeds a 32-bit generator; any int64 the client sends is fine
    kw["stop"] = _stop(body, model.stop if chat else [])
    ids = body.get("stop_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise bad("stop_token_ids", "'stop_token_ids' must be a list of token ids")
        kw["stop_token_ids"] = ids
    if chat:
        kw["stop_token_ids"] = [*kw.get("stop_token_ids", []), *model.stop_token_ids]
    kw["logprobs"] = logprobs
    kw["grammar"] = grammar
    try:
        params = SamplingParams(**kw)
    except InvalidParameterError as exc:   # SamplingParams validates; the error names what the client sent
        raise bad(length_key if exc.param == "max_tokens" else exc.param, str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise bad(None, f"invalid sampling parameters: {exc}") from None
    return params


# ---------------------------------------------------------------- prompts
def scrub(text: str) -> str:
    """Lone surrogates (valid JSON escapes, invalid UTF-8) would crash the tokenizer."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def tokenize_prompt(model: ServedModel, text: str) -> list[int]:
    """Tokenize text that may already start with the BOS text (templates emit it): add the
    model's BOS only when missing, so it is never doubled."""
    return model.engine.tokenize_prompt(scrub(text))


@dataclass
class Prepared:
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool
    prompt_param: str
    top_logprobs: int | None = None     # chat: k when logprobs are on
    texts: list[str | None] = field(default_factory=list)
    plan: Any = None                    # structured.OutputPlan: grammar and tools
    return_progress: bool = False       # llama-server's extension: prompt_progress chunks while streaming


def wants_progress(body: dict, stream: bool) -> bool:
    """`"return_progress": true` (llama-server's name) asks a stream for `prompt_progress` chunks
    while the prompt is read; without `stream` there is nothing to send them in, as there."""
    return bool(_get(body, "return_progress")) and stream


def parse_chat(body: Any, model: ServedModel) -> Prepared:
    body = check_keys(body, CHAT_KEYS)
    _unsupported(body)
    stream, usage = stream_flags(body)
    want = body.get("logprobs")
    if want is not None and not isinstance(want, bool):
        raise bad("logprobs", f"'logprobs' must be true or false, got {_show(want)}")
    k = _get(body, "top_logprobs")
    if k is not None and not want:
        raise bad("top_logprobs", "'top_logprobs' requires 'logprobs': true")
    if k is not None and not 0 <= k <= 20:
        raise bad("top_logprobs", f"'top_logprobs' must be from 0 to 20, got {k}")
    plan = output_plan(body, model, chat=True)
    params = sampling_params(body, model, chat=True, logprobs=(k or 0) if want else None, grammar=plan.grammar)
    text = render_messages(model, body.get("messages"), plan)
    return Prepared([tokenize_prompt(model, text)], params, stream, usage, "messages",
                    top_logprobs=(k or 0) if want else None, texts=[text], plan=plan,
                    return_progress=wants_progress(body, stream))


def parse_completion(body: Any, model: ServedModel) -> Prepared:
    body = check_keys(body, COMPLETION_KEYS)
    _unsupported(body)
    stream, usage = stream_flags(body)
    k = body.get("logprobs")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20):
        raise bad("logprobs", f"'logprobs' must be an integer from 0 to 20, got {_show(k)}")
    plan = output_plan(body, model, chat=False)
    params = sampling_params(body, model, chat=False, logprobs=k, grammar=plan.grammar)
    prompts, texts = _prompts(body.get("prompt"), model)
    if len(prompts) * params.n > MAX_CHOICES:
        raise bad("prompt", f"at most {MAX_CHOICES} choices per request (prompts x n)")
    return Prepared(prompts, params, stream, usage, "prompt", texts=texts, plan=plan,
                    return_progress=wants_progress(body, stream))


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _prompts(prompt: Any, model: ServedModel) -> tuple[list[list[int]], list[str | None]]:
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif _is_ids(prompt):
        items = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) or _is_ids(p) for p in prompt):
        items = prompt
    else:
        raise bad("prompt", "'prompt' must be a string, a list of strings, or token ids")
    n_vocab = getattr(model.engine, "n_vocab", None)
    out, texts = [], []
    for item in items:
        if isinstance(item, str):
            ids = tokenize_prompt(model, item)
            texts.append(item)
        else:
            if n_vocab and any(not 0 <= t < n_vocab for t in item):
                raise bad("prompt", f"token ids must be from 0 to {n_vocab - 1}")
            ids = list(item)
            texts.append(None)
        if not ids:
            raise bad("prompt", "'prompt' is empty")
        out.append(ids)
    return out, texts


# ---------------------------------------------------------------- responses
def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)


def _lp(x: float) -> float:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else -9999.0


def chat_logprobs(items: list[TokenLogprob], k: int) -> list[dict]:
    def one(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": _lp(logprob), "bytes": list(token.encode("utf-8", "replace"))}

    return [{**one(t.token, t.logprob), "top_logprobs": [one(p, l) for _, p, l in t.top[:k]]} for t in items]


def completion_logprobs(items: list[TokenLogprob], offset: int) -> tuple[dict, int]:
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for t in items:
        out["tokens"].append(t.token)
        out["token_logprobs"].append(_lp(t.logprob))
        out["top_logprobs"].append({p: _lp(l) for _, p, l in t.top})
        out["text_offset"].append(offset)
        offset += len(t.token)
    return out, offset


def usage(prompt_tokens: int, completion_tokens: int, cached: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8", "replace")
