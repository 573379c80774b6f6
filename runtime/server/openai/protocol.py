"""OpenAI's request fields -> the core's `ChatRequest` / `CompletionRequest`, and OpenAI's
response shapes (logprobs, usage, SSE).

Everything a client sends is checked here or in the core before the engine sees it: unknown
parameters, wrong types and out-of-range values become a 400 naming the parameter.
"""
from __future__ import annotations

import json
import math
import secrets
from typing import Any

from llmpack.runtime.engine.outputs import TokenLogprob
from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.params import SamplingValues, flag, integer, known_fields, show
from llmpack.runtime.core.plan import Constraint, ToolRequest, make_tool
from llmpack.runtime.core.request import ChatRequest, CompletionRequest
from llmpack.runtime.structured.grammar import GrammarError, json_schema_of
from llmpack.runtime.structured.tool_calls import ToolCall

_SAMPLING = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "n",
             "top_k", "seed", "ignore_eos", "stop_token_ids", "include_stop_str_in_output", "stop")
_COMMON = {"model", "stream", "stream_options", "return_progress", "max_tokens", "user", "logit_bias", "metadata",
           "store", "service_tier", *_SAMPLING}
_SHAPE = {"response_format", "grammar", "json_schema"}   # constrained output (core/plan.py)
CHAT_KEYS = _COMMON | _SHAPE | {"messages", "max_completion_tokens", "logprobs", "top_logprobs",
                                "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
                                "reasoning_effort", "chat_template_kwargs"}
# OpenAI's reasoning_effort -> the core's thinking switch (runtime/chat/reasoning.py)
EFFORTS = {"none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
COMPLETION_KEYS = _COMMON | _SHAPE | {"prompt", "logprobs", "echo", "suffix", "best_of"}


def check_keys(body: Any, allowed: set[str]) -> dict:
    return known_fields(body, allowed, "Unrecognized request argument supplied: {key}", "unknown_parameter")


def _unsupported(body: dict) -> None:
    """Parameters OpenAI clients send that are fine when empty/default, refused otherwise."""
    lb = body.get("logit_bias")
    if lb is not None and (not isinstance(lb, dict) or lb):
        raise bad("logit_bias", "'logit_bias' is not supported by this server.", "unsupported_parameter")
    if body.get("suffix") is not None:
        raise bad("suffix", "'suffix' (insertion) is not supported by this server.", "unsupported_parameter")
    if flag("echo", body.get("echo")):
        raise bad("echo", "'echo' is not supported by this server.", "unsupported_parameter")
    for key in ("user", "service_tier"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise bad(key, f"'{key}' must be a string")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise bad("metadata", "'metadata' must be an object")
    for key in ("parallel_tool_calls", "store"):
        flag(key, body.get(key))


def stream_flags(body: dict) -> tuple[bool, bool]:
    stream = bool(flag("stream", body.get("stream")))
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


def _sampling(body: dict, chat: bool) -> SamplingValues:
    values = SamplingValues(**{k: body.get(k) for k in _SAMPLING})
    length_key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    values.max_tokens = body.get(length_key)
    values.names = {"max_tokens": length_key, "logprobs": "top_logprobs" if chat else "logprobs"}
    best_of = integer("best_of", body.get("best_of"))
    if best_of is not None and best_of != (integer("n", body.get("n")) or 1):
        raise bad("best_of", "'best_of' is not supported (it may only equal n)", "unsupported_parameter")
    return values


def _given(body: dict, key: str) -> bool:
    value = body.get(key)
    return value is not None and not (key == "response_format" and isinstance(value, dict)
                                      and value.get("type") == "text")


def constraint(body: dict) -> Constraint | None:
    """response_format (json_object, json_schema), or llama-server's `grammar` / `json_schema`."""
    asked = [k for k in ("response_format", "grammar", "json_schema") if _given(body, k)]
    if len(asked) > 1:
        raise bad(asked[1], f"'{asked[0]}' and '{asked[1]}' both constrain the output; send only one")
    if not asked:
        return None
    key, value = asked[0], body[asked[0]]
    if key != "response_format":
        return Constraint(key, value, key)
    if not isinstance(value, dict):
        raise bad(key, "'response_format': 'response_format' must be an object like {\"type\": \"json_object\"}",
                  "invalid_schema")
    kind = value.get("type")
    if kind == "json_object":   # llama-server also takes a schema here
        return Constraint("json_schema", value["schema"], key) if value.get("schema") is not None \
            else Constraint("json_object", None, key)
    if kind == "json_schema":
        try:
            return Constraint("json_schema", json_schema_of(value), key)
        except GrammarError as exc:
            raise bad(key, f"'{key}': {exc}", "invalid_schema") from None
    raise bad(key, f"'response_format': 'response_format.type' must be text, json_object or json_schema, got {kind!r}",
              "invalid_schema")


def _list(value: Any, param: str) -> list:
    if not isinstance(value, list) or len(value) > 128:
        raise bad(param, f"'{param}' must be a list (of at most 128 tools)")
    return value


def tool_request(body: dict) -> ToolRequest | None:
    """tools / tool_choice / parallel_tool_calls, or the legacy functions / function_call."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if body.get("functions") is not None:   # the legacy names of the same thing
        if tools is not None:
            raise bad("functions", "send 'tools' or the legacy 'functions', not both")
        tools = [{"type": "function", "function": f} for f in _list(body["functions"], "functions")]
        fc = body.get("function_call")
        choice = {"type": "function", "function": fc} if isinstance(fc, dict) else fc
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "'tool_choice' needs 'tools'")
        return None
    parsed = []
    for i, spec in enumerate(_list(tools, "tools")):
        fn = spec.get("function") if isinstance(spec, dict) and spec.get("type", "function") == "function" else None
        if not isinstance(fn, dict):
            raise bad("tools", f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"parameters\": ...}}}}")
        parsed.append(make_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"tools[{i}].function"))
    req = ToolRequest(parsed, parallel=body.get("parallel_tool_calls") is not False)
    names = {t.name for t in parsed}
    if choice is None or choice in ("auto", "none", "required"):
        req.choice = choice or "auto"
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict) \
            and choice["function"].get("name") in names:
        req.choice, req.forced_name = "function", choice["function"]["name"]
    elif parsed:
        raise bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                 "{\"type\": \"function\", \"function\": {\"name\": NAME}} naming one of the tools")
    return req


def parse_chat(body: Any) -> ChatRequest:
    body = check_keys(body, CHAT_KEYS)
    _unsupported(body)
    stream, usage = stream_flags(body)
    want = body.get("logprobs")
    if want is not None and not isinstance(want, bool):
        raise bad("logprobs", f"'logprobs' must be true or false, got {show(want)}")
    k = integer("top_logprobs", body.get("top_logprobs"))
    if k is not None and not want:
        raise bad("top_logprobs", "'top_logprobs' requires 'logprobs': true")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise bad("reasoning_effort", f"'reasoning_effort' must be one of {', '.join(EFFORTS)}, got {show(effort)}")
    kwargs = body.get("chat_template_kwargs")   # vLLM's and llama-server's: variables for the chat template
    if kwargs is not None and (not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs)):
        raise bad("chat_template_kwargs", "'chat_template_kwargs' must be an object, e.g. {\"enable_thinking\": false}")
    return ChatRequest(body.get("messages"), _sampling(body, chat=True), constraint=constraint(body),
                       tools=tool_request(body), logprobs=(k or 0) if want else None, stream=stream,
                       include_usage=usage, prompt_progress=bool(flag("return_progress", body.get("return_progress"))),
                       template_kwargs=kwargs, think=EFFORTS.get(effort) if effort is not None else None,
                       think_param="reasoning_effort")


def parse_completion(body: Any) -> CompletionRequest:
    body = check_keys(body, COMPLETION_KEYS)
    _unsupported(body)
    stream, usage = stream_flags(body)
    k = integer("logprobs", body.get("logprobs"))   # its range is SamplingParams' (core/params.py names it)
    return CompletionRequest(body.get("prompt"), _sampling(body, chat=False), constraint=constraint(body),
                             logprobs=k, stream=stream, include_usage=usage,
                             prompt_progress=bool(flag("return_progress", body.get("return_progress"))))


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
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for t in items:
        out["tokens"].append(t.token)
        out["token_logprobs"].append(_lp(t.logprob))
        out["top_logprobs"].append({p: _lp(l) for _, p, l in t.top})
        out["text_offset"].append(offset)
        offset += len(t.token)
    return out, offset


def tool_calls(calls: list[ToolCall]) -> list[dict]:
    return [c.to_openai(index=i) for i, c in enumerate(calls)]


def usage(counts: tuple[int, int, int]) -> dict:
    prompt_tokens, completion_tokens, cached = counts
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8", "replace")
