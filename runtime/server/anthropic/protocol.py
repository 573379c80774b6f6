"""Anthropic Messages requests -> the core's `ChatRequest`, and the core's reply -> a Message.

Anthropic's shapes (docs.anthropic.com/en/api/messages): `system` beside `messages`; content as
blocks (text, image, document, tool_use, tool_result, thinking); `tools` with an `input_schema`;
`tool_choice` {type: auto|any|tool|none}; `stop_sequences`; `thinking` {type: enabled,
budget_tokens} | {type: disabled}. A problem is a 400 naming the field as the client sent it
(`messages.0.content.1.source`), rendered as {"type": "error", "error": {...}} by routes.py.
"""
from __future__ import annotations

import json
import secrets
from typing import Any

from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.media import MediaItem
from llmpack.runtime.core.params import SamplingValues, known_fields
from llmpack.runtime.core.plan import Constraint, ToolRequest, make_tool
from llmpack.runtime.core.request import ChatRequest

# Anthropic's fields. Prompt caching is automatic here (the prefix cache), so cache_control is
# welcome and changes nothing; so do the routing hints (service_tier, speed, inference_geo, ...).
KEYS = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
        "tools", "tool_choice", "thinking", "metadata", "service_tier", "output_config", "cache_control",
        "container", "mcp_servers", "context_management", "diagnostics", "inference_geo", "speed",
        "user_profile_id", "workspace_id"}
COUNT_KEYS = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "cache_control",
              "context_management", "mcp_servers"}
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
# Our status -> Anthropic's error type (docs: "Errors").
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def error_body(err: ApiError) -> dict:
    kind = ERROR_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def _need(ok: object, param: str, message: str) -> None:
    if not ok:
        raise bad(param, f"{param}: {message}")


def _text_of(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    _need(isinstance(blocks, list), where, "must be a string or a list of text blocks")
    out = []
    for i, b in enumerate(blocks):
        _need(isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str), f"{where}.{i}",
              "only text blocks are allowed here")
        out.append(b["text"])
    return "\n".join(out)


def _source_part(block: dict, where: str) -> dict | MediaItem:
    """An image or document block as the content part the core reads (a MediaItem, text or file)."""
    src = block.get("source")
    _need(isinstance(src, dict), f"{where}.source", "Field required")
    kind, media, data = src.get("type"), src.get("media_type"), src.get("data")
    if block["type"] == "image":
        if kind == "base64":
            _need(isinstance(data, str) and isinstance(media, str), f"{where}.source", "needs media_type and data")
            return MediaItem("image", f"data:{media};base64,{data}", media, where)
        _need(kind == "url" and isinstance(src.get("url"), str), f"{where}.source.type",
              "must be 'base64' or 'url' (with a url)")
        return MediaItem("image", src["url"], None, where)
    title = block.get("title")
    head = f"{title}\n\n" if isinstance(title, str) and title else ""
    if kind == "text":
        _need(isinstance(data, str), f"{where}.source.data", "Field required")
        return {"type": "text", "text": head + data}
    if kind == "content":
        return {"type": "text", "text": head + _text_of(src.get("content"), f"{where}.source.content")}
    _need(kind == "base64" and isinstance(data, str) and isinstance(media, str), f"{where}.source",
          "must be a text, content or base64 source (base64 needs media_type and data)")
    name = title if isinstance(title, str) and title else "document"
    return {"type": "file", "file": {"filename": name, "file_data": f"data:{media};base64,{data}"}}


def _blocks(role: str, content: list, where: str) -> list[dict]:
    """One Anthropic turn -> chat-template messages: tool results become `tool` turns before the
    rest, tool_use blocks the assistant's tool_calls, earlier thinking is left out. A picture keeps
    its block name ("messages.0.content.1") in its MediaItem, for 400s."""
    parts: list[dict | MediaItem] = []
    calls: list[dict] = []
    results: list[dict] = []
    for j, b in enumerate(content):
        bw = f"{where}.content.{j}"
        _need(isinstance(b, dict) and isinstance(b.get("type"), str), bw, "must be a content block")
        kind = b["type"]
        if kind == "text":
            _need(isinstance(b.get("text"), str), f"{bw}.text", "Field required")
            parts.append({"type": "text", "text": b["text"]})
        elif kind in ("image", "document"):
            parts.append(_source_part(b, bw))
        elif kind == "tool_use" and role == "assistant":
            _need(isinstance(b.get("id"), str) and isinstance(b.get("name"), str), bw, "tool_use needs id and name")
            _need(isinstance(b.get("input", {}), dict), f"{bw}.input", "must be an object")
            calls.append({"id": b["id"], "type": "function", "function": {
                "name": b["name"], "arguments": json.dumps(b.get("input", {}), ensure_ascii=False)}})
        elif kind == "tool_result" and role == "user":
            _need(isinstance(b.get("tool_use_id"), str), f"{bw}.tool_use_id", "Field required")
            text = _text_of(b.get("content", ""), f"{bw}.content")
            results.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                            "content": f"Error: {text}" if b.get("is_error") else text})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue   # earlier thinking stays out of the prompt, as the templates expect
        else:
            raise bad(f"{bw}.type", f"{bw}.type: {kind!r} blocks are not allowed in a {role} message")
    out = list(results)
    if parts or calls or not results:
        msg: dict[str, Any] = {"role": role, "content": parts or ""}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _messages(body: dict) -> list[dict]:
    """The chat-template messages (the system prompt and tool results move parts away from the
    client's indexes: a picture's MediaItem keeps the client's name)."""
    msgs = body.get("messages")
    _need(isinstance(msgs, list) and msgs, "messages", "Field required (a non-empty list)")
    out: list[dict] = []
    if body.get("system") is not None:
        text = _text_of(body["system"], "system")
        if text:
            out.append({"role": "system", "content": text})
    for i, m in enumerate(msgs):
        where = f"messages.{i}"
        _need(isinstance(m, dict), where, "must be an object with role and content")
        role, content = m.get("role"), m.get("content")
        _need(role in ("user", "assistant"), f"{where}.role", "must be 'user' or 'assistant'")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        else:
            _need(isinstance(content, list), f"{where}.content", "must be a string or a list of blocks")
            out += _blocks(role, content, where)
    return out


def _tools(body: dict) -> ToolRequest | None:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if choice is not None:
        _need(isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool", "none"),
              "tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'")
    if tools is None:
        _need(choice is None or choice["type"] in ("auto", "none"), "tool_choice", "needs tools")
        return None
    _need(isinstance(tools, list), "tools", "must be a list")
    parsed = []
    for i, t in enumerate(tools):
        _need(isinstance(t, dict), f"tools.{i}", "must be an object")
        _need(isinstance(t.get("input_schema"), dict), f"tools.{i}.input_schema", "Field required")
        parsed.append(make_tool(t.get("name"), t.get("description"), t["input_schema"], f"tools.{i}"))
    req = ToolRequest(parsed, parallel=not (choice or {}).get("disable_parallel_tool_use", False))
    kind = (choice or {}).get("type", "auto")
    req.choice = {"auto": "auto", "any": "required", "none": "none", "tool": "function"}[kind]
    if kind == "tool":
        name = choice.get("name")
        _need(name in {t.name for t in parsed}, "tool_choice.name", f"{name!r} is not one of the tools")
        req.forced_name = name
    return req


def _thinking(body: dict) -> tuple[bool | str | None, int | None]:
    """(think, budget): {type: enabled, budget_tokens} turns thinking on and ends it after that many
    tokens; adaptive leaves the length to the model; disabled turns it off; output_config.effort
    picks a level; absent leaves the model's own default."""
    spec = body.get("thinking")
    effort = (body.get("output_config") or {}).get("effort")
    _need(effort is None or effort in EFFORTS, "output_config.effort", f"must be one of {', '.join(EFFORTS)}")
    if spec is None:
        return EFFORTS.get(effort), None
    _need(isinstance(spec, dict) and spec.get("type") in ("enabled", "disabled", "adaptive", "between_tools"),
          "thinking.type", "must be 'enabled', 'adaptive' or 'disabled'")
    if spec["type"] == "disabled":
        return False, None
    if spec["type"] != "enabled":
        return EFFORTS.get(effort, True), None
    budget = spec.get("budget_tokens")
    _need(budget is None or (isinstance(budget, int) and not isinstance(budget, bool) and budget >= 1),
          "thinking.budget_tokens", "must be a positive integer")
    return EFFORTS.get(effort, True), budget


def _constraint(body: dict) -> Constraint | None:
    """output_config.format: {type: json_schema, schema} (Anthropic's structured outputs)."""
    config = body.get("output_config")
    _need(config is None or isinstance(config, dict), "output_config", "must be an object")
    fmt = (config or {}).get("format")
    if fmt is None:
        return None
    _need(isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict),
          "output_config.format", "must be {\"type\": \"json_schema\", \"schema\": {...}}")
    return Constraint("json_schema", fmt["schema"], "output_config.format")


def chat_request(body: Any, *, counting: bool = False) -> ChatRequest:
    """The core's request; `counting` (count_tokens) takes no max_tokens and never streams."""
    known_fields(body, COUNT_KEYS if counting else KEYS, "{key}: Extra inputs are not permitted",
                 not_object="body: The request body must be a JSON object.", body_param="body")
    for key in ("mcp_servers", "container"):
        _need(not body.get(key), key, "not supported: this server runs no MCP servers or code containers")
    _need(isinstance(body.get("model"), str), "model", "Field required")
    values = SamplingValues(temperature=body.get("temperature"), top_p=body.get("top_p"), top_k=body.get("top_k"),
                            max_tokens=body.get("max_tokens"), stop=body.get("stop_sequences"),
                            names={"stop": "stop_sequences"})
    think, budget = _thinking(body)
    messages = _messages(body)
    req = ChatRequest(messages, values, constraint=_constraint(body), tools=_tools(body), think=think,
                      reasoning_budget=budget, think_param="thinking")
    if counting:
        return req
    mt = body.get("max_tokens")
    _need(isinstance(mt, int) and not isinstance(mt, bool) and mt >= 1, "max_tokens", "Field required (a positive integer)")
    for name in ("temperature", "top_p"):   # Anthropic's ranges, narrower than the engine's
        value = body.get(name)
        _need(value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1),
              name, "must be a number from 0 to 1")
    _need(isinstance(body.get("stream", False), bool), "stream", "must be true or false")
    req.stream = body.get("stream", False)
    return req


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def stop_reason(finish: str | None, stop_sequence: str | None) -> str:
    return "stop_sequence" if finish == "stop" and stop_sequence else STOP_REASONS.get(finish or "stop", "end_turn")


def tool_use_block(call_id: str, name: str, arguments: str) -> dict:
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        args = {}
    return {"type": "tool_use", "id": call_id, "name": name, "input": args if isinstance(args, dict) else {}}


def citations(sources: list | None) -> list[dict]:
    """The server's sources (documents/attribution.py) as Anthropic's citations: `page_location`
    for a PDF (end page exclusive, as Anthropic counts), else `char_location` in the document's
    text; `document_index` counts the request's base64 documents in order."""
    out = []
    for s in sources or ():
        p = s.place
        where = {"cited_text": s.quote, "document_index": p.doc_index, "document_title": p.file}
        if p.page:
            out.append({"type": "page_location", **where, "start_page_number": p.page, "end_page_number": p.page + 1})
        elif p.offset is not None:
            out.append({"type": "char_location", **where, "start_char_index": p.offset + s.quote_start,
                        "end_char_index": p.offset + s.quote_end})
    return out


def message(msg_id: str, model: str, *, thinking: str, text: str, calls: list, finish: str | None,
            stop_sequence: str | None, usage: dict, cited: list[dict] | None = None) -> dict:
    """A whole Message: thinking first, then the text (always one block when there is nothing else,
    with its `citations` when the request read documents), then tool_use."""
    content: list[dict] = []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": ""})
    if text or not calls:
        content.append({"type": "text", "text": text, **({"citations": cited} if cited else {})})
    content += [tool_use_block(c.id, c.name, c.arguments) for c in calls]
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(finish, stop_sequence), "stop_sequence": stop_sequence, "usage": usage}


def usage(prompt_tokens: int, output_tokens: int, cached: int) -> dict:
    return {"input_tokens": prompt_tokens - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": output_tokens}
