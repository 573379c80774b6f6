"""Ollama's request and response shapes (github.com/ollama/ollama, docs/api.md) <-> the core.

/api/chat and /api/generate take `options` (Ollama's sampling names), `format` ("json" or a JSON
schema), `tools` (OpenAI's function shape), `think` (true/false or "low"/"medium"/"high") and
`stream`, which is on unless the client turns it off; they answer NDJSON lines whose durations
are nanoseconds. A problem is a 400 naming the field (`options.temperature`), rendered as
Ollama's {"error": "..."} by routes.py; a field or option it does not know is ignored, as Ollama
ignores it (noted once on the console).
"""
from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.media import MediaItem, base64_image_item
from llmpack.runtime.core.params import SamplingValues, flag, known_fields
from llmpack.runtime.core.plan import Constraint, ToolRequest, make_tool
from llmpack.runtime.core.request import ChatRequest, CompletionRequest

API_VERSION = "0.12.0"   # the Ollama API whose shapes this room serves (/api/version)
# Ollama option -> the core's sampling name.
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
            "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
            "frequency_penalty": "frequency_penalty", "stop": "stop", "num_predict": "max_tokens"}
# Options Ollama applies when it loads a model (context, threads, GPU layers...) or samplers the
# engine lacks: the one model here was loaded at start-up, so these are left unused, as Ollama
# itself leaves an option it cannot apply (it logs a warning and answers).
UNUSED = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "vocab_only", "use_mmap", "use_mlock",
          "num_thread", "numa", "num_keep", "penalize_newline", "repeat_last_n", "typical_p", "tfs_z", "mirostat",
          "mirostat_tau", "mirostat_eta", "logits_all", "embedding_only"}
CHAT_KEYS = {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think"}
GENERATE_KEYS = {"model", "prompt", "suffix", "images", "format", "options", "system", "template", "context",
                 "stream", "raw", "keep_alive", "think"}
THINK_LEVELS = ("low", "medium", "high")


def error_body(err: ApiError) -> dict:
    return {"error": err.message}


def now_iso(ts: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc).isoformat().replace("+00:00", "Z")


def check_keys(body: Any, allowed: set[str]) -> dict:
    """The body, a JSON object. A field this room does not know is left unused with a note on the
    console, as Ollama does (its Go JSON decoding skips unknown fields): clients send newer fields
    (`logprobs`, `truncate`, `width`...) and expect an answer, not a 400."""
    known_fields(body, allowed, "", not_object="the request body must be a JSON object",
                 unused=lambda key: _note_unused(f"field {key[:60]!r}"))
    keep = body.get("keep_alive")   # the one model stays loaded; the value is checked as Ollama reads it
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, (int, float, str))):
        raise bad("keep_alive", "keep_alive must be a duration such as \"5m\" or a number of seconds")
    return body


_NOTED: set[str] = set()


def _note_unused(what: str) -> None:
    """One console line per unused field or option (a few dozen at most), as Ollama logs a warning."""
    if what in _NOTED or len(_NOTED) >= 32:
        return
    _NOTED.add(what)
    print(f"llmpack: an Ollama request has the {what}, which this server does not use; it is ignored, as "
          "Ollama ignores it", file=sys.stderr, flush=True)


def sampling(options: Any) -> SamplingValues:
    """Ollama `options` -> the core's SamplingValues; each is type-checked under its Ollama name."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise bad("options", "options must be an object")
    values = SamplingValues(names={v: f"options.{k}" for k, v in SAMPLING.items()})
    for name, value in options.items():
        if name in UNUSED or value is None:
            continue
        if name not in SAMPLING:   # Ollama: "invalid option provided", a warning, and the answer
            _note_unused(f"option {str(name)[:60]!r}")
            continue
        if name == "num_predict" and isinstance(value, int) and not isinstance(value, bool) and value in (-1, -2):
            continue   # -1: until the turn ends; -2: until the context is full. Here, both: no cap
        setattr(values, SAMPLING[name], value)
    return values


def constraint(fmt: Any) -> Constraint | None:
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return Constraint("json_object", None, "format")
    if not isinstance(fmt, dict):
        raise bad("format", "format must be \"json\" or a JSON schema object")
    return Constraint("json_schema", fmt, "format")


def think(value: Any) -> bool | str | None:
    if not (value is None or isinstance(value, bool) or value in THINK_LEVELS):
        raise bad("think", "think must be true, false or one of \"low\", \"medium\", \"high\"")
    return value


def _images(images: Any, where: str) -> list[MediaItem]:
    """Ollama's base64 strings as the core's MediaItems, each labelled by its bytes (PNG, JPEG, WebP, GIF) and
    named as the client sent it ("messages[0].images[1]"), for 400s."""
    if images is None:
        return []
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise bad(where, f"{where} must be a list of base64 images")
    return [base64_image_item(b64, f"{where}[{k}]") for k, b64 in enumerate(images)]


def _tool_calls(m: dict, i: int) -> list[dict]:
    calls = []
    for j, c in enumerate(m.get("tool_calls") or []):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad("messages", f"messages[{i}].tool_calls[{j}].function.name is required")
        args = fn.get("arguments", {})
        calls.append({"id": c.get("id") or f"call_{i}_{j}", "type": "function",
                      "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return calls


def chat_messages(messages: Any) -> list[dict]:
    """Ollama's messages as chat-template messages: images become MediaItems, tool calls the
    OpenAI shape, and a tool reply names its call (Ollama sends the tool's name, not an id)."""
    if not isinstance(messages, list):
        raise bad("messages", "messages must be a list")
    out: list[dict] = []
    last_calls: dict[str, str] = {}
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise bad("messages", f"messages[{i}].role must be system, user, assistant or tool")
        content = m.get("content") or ""
        if not isinstance(content, str):
            raise bad("messages", f"messages[{i}].content must be a string")
        images = _images(m.get("images"), f"messages[{i}].images")
        msg: dict[str, Any] = {"role": m["role"], "content": [{"type": "text", "text": content}, *images] if images
                               else content}
        if m["role"] == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m, i)
            last_calls = {c["function"]["name"]: c["id"] for c in msg["tool_calls"]}
        if m["role"] == "tool":
            name = m.get("tool_name") or m.get("name")
            msg["tool_call_id"] = m.get("tool_call_id") or last_calls.get(name) or ""
            if name:
                msg["name"] = name
        out.append(msg)
    return out


def _tools(tools: Any) -> ToolRequest | None:
    if not tools:
        return None
    if not isinstance(tools, list):
        raise bad("tools", "tools must be a list")
    parsed = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict):
            raise bad("tools", f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}")
        parsed.append(make_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"tools[{i}].function"))
    return ToolRequest(parsed)


def stream_flag(body: dict) -> bool:
    value = flag("stream", body.get("stream"))
    return True if value is None else value


def chat_request(body: Any) -> ChatRequest:
    body = check_keys(body, CHAT_KEYS)
    return ChatRequest(chat_messages(body.get("messages")), sampling(body.get("options")),
                       constraint=constraint(body.get("format")), tools=_tools(body.get("tools")),
                       think=think(body.get("think")), stream=stream_flag(body))


def generate_request(body: Any) -> ChatRequest | CompletionRequest:
    """With `raw` the prompt goes to the model as it is (a completion); else it is the user turn
    of a chat, after `system`."""
    body = check_keys(body, GENERATE_KEYS)
    if body.get("template"):
        raise bad("template", "template: this file's model answers with its own chat template; send raw: true "
                  "with a prompt you formatted yourself instead")
    if body.get("suffix"):
        raise bad("suffix", "suffix (fill-in-the-middle) is not supported by this server")
    if body.get("context"):
        raise bad("context", "context (the token ids of an earlier answer) is not supported: send the "
                  "conversation to /api/chat")
    prompt = body.get("prompt") or ""
    if not isinstance(prompt, str):
        raise bad("prompt", "prompt must be a string")
    values, fmt, stream = sampling(body.get("options")), constraint(body.get("format")), stream_flag(body)
    if flag("raw", body.get("raw")):
        if body.get("images"):
            raise bad("images", "images need the chat template: leave raw off")
        return CompletionRequest(prompt, values, constraint=fmt, stream=stream)
    messages: list[dict] = []
    if body.get("system"):
        if not isinstance(body["system"], str):
            raise bad("system", "system must be a string")
        messages.append({"role": "system", "content": body["system"]})
    images = _images(body.get("images"), "images")
    messages.append({"role": "user", "content": [{"type": "text", "text": prompt}, *images] if images else prompt})
    return ChatRequest(messages, values, constraint=fmt, think=think(body.get("think")), stream=stream,
                       param="prompt")


def tool_calls(calls: list) -> list[dict]:
    out = []
    for i, c in enumerate(calls):
        try:
            args = json.loads(c.arguments) if c.arguments else {}
        except ValueError:
            args = {}
        out.append({"id": c.id, "function": {"index": i, "name": c.name, "arguments": args}})
    return out


def timings(started: float, first: float | None, prompt_tokens: int, eval_tokens: int) -> dict:
    """Ollama's final counters; durations in nanoseconds."""
    end = time.perf_counter()
    first = first or end
    return {"total_duration": int((end - started) * 1e9), "load_duration": 0, "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": int((first - started) * 1e9), "eval_count": eval_tokens,
            "eval_duration": int((end - first) * 1e9)}


def done_reason(finish: str | None) -> str:
    return "length" if finish == "length" else "stop"


def ndjson(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace") + b"\n"
