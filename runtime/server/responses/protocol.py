"""OpenAI Responses requests -> the core's `ChatRequest`, and the core's reply -> Response objects.

The Responses API (platform.openai.com/docs/api-reference/responses) takes `input` as a string or
a list of items (messages with input_text / input_image / input_file parts, `function_call` and
`function_call_output` items), `instructions` as the system turn, flat function `tools`
({type, name, parameters}), `text.format` for JSON output, `max_output_tokens` and
`reasoning.effort`. Its output is a list of items: a `reasoning` item with the thinking, a
`message` with `output_text`, and `function_call` items.
"""
from __future__ import annotations

import json
import secrets
from typing import Any

from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.media import MediaItem
from llmpack.runtime.core.params import SamplingValues, flag, known_fields
from llmpack.runtime.core.plan import Constraint, ToolRequest, make_tool
from llmpack.runtime.core.request import ChatRequest

# OpenAI's fields, plus the sampling names llama-server's /v1/responses also takes.
KEYS = {"model", "input", "instructions", "previous_response_id", "store", "stream", "max_output_tokens",
        "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning", "metadata",
        "user", "truncation", "include", "service_tier", "background", "prompt_cache_key", "safety_identifier",
        "top_k", "min_p", "seed", "stop", "presence_penalty", "frequency_penalty", "repetition_penalty"}
EFFORTS = {"none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
ROLES = ("user", "assistant", "system", "developer")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _media(part: dict, where: str) -> MediaItem:
    """An input_image or input_audio part as the core's MediaItem."""
    if part["type"] == "input_image":
        return MediaItem("image", part.get("image_url"), None, where)
    spec = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else {}
    return MediaItem("audio", spec.get("data"), spec.get("format"), where)


def _stored_part(item: MediaItem) -> dict:
    """A MediaItem as the store keeps it: the room's own part, plus where the client first sent it."""
    if item.kind == "image":
        return {"type": "input_image", "image_url": item.data, "where": item.where}
    return {"type": "input_audio", "input_audio": {"data": item.data, "format": item.mime}, "where": item.where}


def stored(messages: list[dict]) -> list[dict]:
    """A conversation as the store keeps it (JSON): each picture or clip as an input_image or
    input_audio part; `restored` reads it back for the next turn's previous_response_id."""
    return [{**m, "content": [_stored_part(p) if isinstance(p, MediaItem) else p for p in m["content"]]}
            if isinstance(m.get("content"), list) else m for m in messages]


def restored(messages: list[dict]) -> list[dict]:
    """A stored conversation with its pictures and clips as MediaItems again, named where they were sent."""
    def part(p: Any) -> Any:
        if isinstance(p, dict) and p.get("type") in ("input_image", "input_audio"):
            return _media(p, p.get("where") or "previous_response_id")
        return p
    return [{**m, "content": [part(p) for p in m["content"]]} if isinstance(m.get("content"), list) else m
            for m in messages]


def _content(content: Any, where: str) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, f"'{where}' must be a string or a list of content parts")
    parts = []
    for j, p in enumerate(content):
        pw = f"{where}[{j}]"
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(p.get("text"), str):
                raise bad(f"{pw}.text", f"'{pw}.text' must be a string")
            parts.append({"type": "text", "text": p["text"]})
        elif kind in ("input_image", "input_audio"):
            if kind == "input_image" and not isinstance(p.get("image_url"), str):
                raise bad(f"{pw}.image_url", f"'{pw}.image_url' must be a URL or a data: URL (file_id is not "
                          "supported: this server keeps no files)")
            parts.append(_media(p, pw))
        elif kind == "input_file":
            if not isinstance(p.get("file_data"), str):
                raise bad(f"{pw}.file_data", f"'{pw}.file_data' is required (file_id and file_url are not "
                          "supported: this server keeps and fetches no files)")
            parts.append({"type": "file", "file": {"file_data": p["file_data"], "filename": p.get("filename") or "file"}})
        else:
            raise bad(f"{pw}.type", f"'{pw}.type' must be input_text, input_image, input_audio or input_file, got {kind!r}")
    return parts


def input_messages(value: Any) -> list[dict]:
    """`input` as chat-template messages: function calls join an assistant turn's tool_calls,
    their outputs become `tool` turns, reasoning items are left out (as the templates expect)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("input", "'input' must be a string or a non-empty list of items")
    out: list[dict] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, f"'{where}' must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ROLES:
                raise bad(f"{where}.role", f"'{where}.role' must be one of {', '.join(ROLES)}")
            out.append({"role": item["role"], "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            name, args, call_id = item.get("name"), item.get("arguments", "{}"), item.get("call_id")
            if not all(isinstance(x, str) for x in (name, args, call_id)):
                raise bad(where, f"'{where}' (function_call) needs string call_id, name and arguments")
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad(f"{where}.call_id", f"'{where}.call_id' is required")
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)})
        elif kind != "reasoning":
            raise bad(f"{where}.type", f"'{where}.type' {kind!r} is not supported here (message, function_call, "
                      "function_call_output and reasoning are)")
    return out


def _tools(body: dict) -> ToolRequest | None:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "'tool_choice' needs 'tools'")
        return None
    if not isinstance(tools, list):
        raise bad("tools", "'tools' must be a list")
    parsed = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            raise bad(f"tools[{i}].type", f"tools[{i}] is a {kind!r} tool; this server runs function tools only "
                      "(the model cannot search the web or run code here)")
        parsed.append(make_tool(t.get("name"), t.get("description"), t.get("parameters"), f"tools[{i}]"))
    req = ToolRequest(parsed, parallel=flag("parallel_tool_calls", body.get("parallel_tool_calls")) is not False)
    if choice is None or choice in ("auto", "none", "required"):
        req.choice = choice or "auto"
    elif isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name") in {t.name for t in parsed}:
        req.choice, req.forced_name = "function", choice["name"]
    else:
        raise bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                 "{\"type\": \"function\", \"name\": NAME} naming one of the tools")
    return req


def _constraint(body: dict) -> Constraint | None:
    text = body.get("text")
    if text is None:
        return None
    fmt = text.get("format") if isinstance(text, dict) else "?"
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_object", "json_schema"):
        raise bad("text.format", "'text.format.type' must be text, json_object or json_schema")
    if fmt["type"] == "json_object":
        return Constraint("json_object", None, "text.format")
    if not isinstance(fmt.get("schema"), dict):
        raise bad("text.format.schema", "'text.format.schema' is required for json_schema")
    return Constraint("json_schema", fmt["schema"], "text.format")


def _think(body: dict) -> bool | str | None:
    reasoning = body.get("reasoning")
    if reasoning is None:
        return None
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else "?"
    if effort is not None and effort not in EFFORTS:
        raise bad("reasoning.effort", f"'reasoning.effort' must be one of {', '.join(EFFORTS)}")
    return EFFORTS.get(effort) if effort is not None else None


def chat_request(body: Any, history: list[dict]) -> tuple[ChatRequest, list[dict]]:
    """(the core's request, the conversation a stored response keeps: `history` (the stored
    conversation of previous_response_id) and this input, without `instructions`, which OpenAI
    does not carry over to the next response)."""
    known_fields(body, KEYS, "Unrecognized request argument supplied: {key}", "unknown_parameter")
    if flag("background", body.get("background")):
        raise bad("background", "'background' responses are not supported: stream the response instead",
                  "unsupported_parameter")
    for key in ("store", "stream"):
        flag(key, body.get(key))
    conversation = [*history, *input_messages(body.get("input"))]
    messages = list(conversation)
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise bad("instructions", "'instructions' must be a string")
        messages.insert(0, {"role": "system", "content": instructions})
    values = SamplingValues(**{k: body.get(k) for k in ("temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                                         "presence_penalty", "frequency_penalty", "repetition_penalty")},
                            max_tokens=body.get("max_output_tokens"), names={"max_tokens": "max_output_tokens"})
    req = ChatRequest(messages, values, constraint=_constraint(body), tools=_tools(body), think=_think(body),
                      think_param="reasoning.effort", stream=bool(body.get("stream")), param="input")
    return req, conversation


def message_item(item_id: str, text: str | None, status: str, annotations: list[dict] | None = None) -> dict:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": annotations or [],
                                        "logprobs": []}]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def call_item(item_id: str, call: Any, status: str, arguments: str | None = None) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name,
            "arguments": call.arguments if arguments is None else arguments, "status": status}


def file_citations(sources: list | None) -> list[dict]:
    """The server's sources (documents/attribution.py) as OpenAI's `file_citation` annotations:
    `index` is where the supported sentence ends in the text."""
    return [{"type": "file_citation", "index": s.reply_end, "file_id": s.place.file_id, "filename": s.place.file}
            for s in sources or ()]


def output_items(thinking: str, text: str, calls: list, ids: dict[str, str], status: str = "completed",
                 annotations: list[dict] | None = None) -> list[dict]:
    """Reasoning, then the message (when there is text, or nothing else), then the calls; `ids`
    holds the item ids a stream already announced, so the final object names the same items."""
    items: list[dict] = []
    if thinking:
        items.append(reasoning_item(ids.setdefault("reasoning", new_id("rs")), thinking, status))
    if text or not calls:
        items.append(message_item(ids.setdefault("message", new_id("msg")), text, status, annotations))
    items += [call_item(ids.setdefault(c.id, new_id("fc")), c, status) for c in calls]
    return items


def assistant_turn(text: str, calls: list) -> dict:
    """The reply as the next response's history holds it (without its thinking)."""
    turn: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        turn["tool_calls"] = [c.to_openai() for c in calls]
    return turn


def response_object(body: dict, response_id: str, model: str, created: int, *, status: str, output: list[dict],
                    usage: dict | None = None, finish: str | None = None) -> dict:
    """The Response object: status in_progress while streaming, then completed, or incomplete when
    max_output_tokens cut it."""
    text = body.get("text") if isinstance(body.get("text"), dict) else {}
    reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
    return {
        "id": response_id, "object": "response", "created_at": created, "status": status, "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" and finish == "length" else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None, "model": model, "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": None}, "service_tier": "default",
        "store": body.get("store") is not False, "temperature": body.get("temperature"),
        "text": {"format": text.get("format") or {"type": "text"}}, "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [], "top_p": body.get("top_p"), "truncation": "disabled", "usage": usage,
        "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def usage(prompt_tokens: int, output_tokens: int, cached: int, reasoning_tokens: int) -> dict:
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt_tokens + output_tokens}
