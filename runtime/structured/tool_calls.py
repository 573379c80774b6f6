"""Tool (function) calling: how each model family writes a call, and reading calls back.

The server never runs a tool. It tells the model which tools exist, recognises the calls the
model writes, and returns them as OpenAI `tool_calls`; the client runs them and sends the
results back as `role: "tool"` messages.

A family's *tool format* (a recipe's `tool_format`) says how calls look in its text:

    hermes   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Qwen, Hermes, ChatML)
    llama3   {"name": "f", "parameters": {...}}                            (Llama 3.1+ JSON calls)
    mistral  [TOOL_CALLS] [{"name": "f", "arguments": {...}}]               (Mistral v3+)

Reading is lenient (`parse_calls` tries every format, then bare JSON with a known tool name),
because a model does not always use its family's format. Forcing is strict: `forced_grammar`
lets `tool_choice: "required"` or a named function produce nothing but well-formed calls whose
arguments match the tool's parameter schema.
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass

from llmpack.runtime.structured.grammar import GrammarError, schema_to_gbnf

@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict


@dataclass(slots=True)
class ToolCall:
    name: str
    arguments: str            # JSON text, as OpenAI returns it
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.id or "call_" + secrets.token_hex(12)

    def to_openai(self, index: int | None = None) -> dict:
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def _args_key(fmt: str) -> str:
    return "parameters" if fmt == "llama3" else "arguments"


# ---------------------------------------------------------------- prompting
def instructions(tools: list[Tool], fmt: str, parallel: bool) -> str:
    """The system-prompt text that teaches a model whose template knows no tools to call them."""
    listing = "\n".join(json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters},
                                   ensure_ascii=False) for t in tools)
    example = render_calls([ToolCall("function_name", '{"argument": "value"}')], fmt)
    many = " You may call several functions, one after another." if parallel else " Call one function at a time."
    return ("You can call functions to help answer. The functions are listed below, one JSON object per line:\n"
            f"{listing}\n\nTo call a function, reply with only this, filled in:\n{example}\n"
            f"The arguments must be valid JSON that matches the function's parameters.{many} "
            "If no function is needed, answer normally.")


def render_calls(calls: list[ToolCall], fmt: str) -> str:
    """An assistant turn's calls as the model would have written them."""
    def obj(c: ToolCall) -> str:
        try:
            args = json.loads(c.arguments)
        except ValueError:
            args = c.arguments
        return json.dumps({"name": c.name, _args_key(fmt): args}, ensure_ascii=False)

    if fmt == "mistral":
        return "[TOOL_CALLS] [" + ", ".join(obj(c) for c in calls) + "]"
    if fmt == "llama3":
        return "\n".join(obj(c) for c in calls)
    return "\n".join(f"<tool_call>\n{obj(c)}\n</tool_call>" for c in calls)


def render_result(content: str, fmt: str, name: str | None) -> str:
    """A tool's result, for templates that have no tool role (sent as a user turn)."""
    label = f' name="{name}"' if name else ""
    if fmt == "hermes":
        return f"<tool_response>\n{content}\n</tool_response>"
    return f"<tool_result{label}>\n{content}\n</tool_result>"


# ---------------------------------------------------------------- forcing
MARKERS = {"hermes": ("<tool_call>", "</tool_call>"), "mistral": ("[TOOL_CALLS]",), "llama3": ()}


def forced_grammar(tools: list[Tool], fmt: str, parallel: bool, tokens: dict[str, int] | None = None) -> str:
    """GBNF that admits only calls of `tools` in format `fmt`, with schema-valid arguments.

    `tokens` maps the format's markers (MARKERS) to the id of the single token the model has
    for each, if it has one: the grammar then asks for that token (`<[id]>`), exactly what the
    model writes unforced, instead of spelling the marker out of text pieces it never saw in
    training (Mistral's [TOOL_CALLS] is a control token, Qwen's <tool_call> one token)."""
    key = _args_key(fmt)
    tokens = tokens or {}
    variants = [{"type": "object", "properties": {"name": {"const": t.name}, key: t.parameters},
                 "required": ["name", key], "additionalProperties": False} for t in tools]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    try:
        rules = schema_to_gbnf(schema)
    except GrammarError as exc:
        raise GrammarError(f"a tool's parameters {exc}".replace("parameters the JSON schema", "parameters schema"))
    rules = re.sub(r"(?m)^root ::=", "call ::=", rules)

    def mark(text: str) -> str:
        return f"<[{tokens[text]}]>" if text in tokens else json.dumps(text)

    if fmt == "mistral":
        more = ' ( "," " "? call )*' if parallel else ""
        root = f'root ::= {mark("[TOOL_CALLS]")} " "? "[" call{more} "]"'
    elif fmt == "llama3":
        root = 'root ::= call' + (' ( "\\n" call )*' if parallel else "") + ' "\\n"?'
    else:
        one = f'{mark("<tool_call>")} "\\n" call "\\n" {mark("</tool_call>")}'
        root = f"root ::= {one}" + (f' ( "\\n" {one} )*' if parallel else "") + ' "\\n"?'
    # The trailing newline is optional: a model that writes one after its last call and then
    # stops must not be made to start another call.
    return root + "\n" + rules


# ---------------------------------------------------------------- reading
_DECODER = json.JSONDecoder()
_STARTS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "```json")
_LONGEST_START = max(map(len, _STARTS))


def _as_call(obj, names: set[str]) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):        # {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(name, str) or name not in names:
        return None
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None
        return ToolCall(name, args)
    if not isinstance(args, dict):
        return None
    return ToolCall(name, json.dumps(args, ensure_ascii=False))


def _json_values(text: str) -> list:
    """Consecutive JSON values in text (separated by whitespace, ',' or ';'), up to the first
    thing that is not JSON."""
    values, pos = [], 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,;":
            pos += 1
        if pos >= len(text) or text[pos] not in "{[":
            return values
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except ValueError:
            return values
        values.append(value)
        if text[pos:pos + 3] == "```":
            return values


def _calls_in(values: list, names: set[str]) -> list[ToolCall]:
    calls = []
    for v in values:
        if isinstance(v, dict) and isinstance(v.get("tool_calls"), list):
            v = v["tool_calls"]
        for item in (v if isinstance(v, list) else [v]):
            call = _as_call(item, names)
            if call is None:
                return []
            calls.append(call)
    return calls


def parse_calls(text: str, names: set[str]) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) from a model's reply: the text before the first call is the content.
    No calls found -> (text, [])."""
    if "<tool_call>" in text:
        head = text[:text.index("<tool_call>")]
        bodies = re.findall(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", text, re.DOTALL)
        calls = [c for b in bodies for c in _calls_in(_json_values(b), names)]
        if calls and len(calls) >= len(bodies):
            return head.strip() or None, calls
    for marker in _STARTS[1:]:
        if marker in text:
            at = text.index(marker)
            calls = _calls_in(_json_values(text[at + len(marker):]), names)
            if calls:
                return text[:at].strip() or None, calls
    at = _first_json(text)
    if at is not None:
        calls = _calls_in(_json_values(text[at:]), names)
        if calls:
            return text[:at].strip() or None, calls
    return text, []


def _first_json(text: str) -> int | None:
    """Where a bare call may start: at the beginning, or on a line that starts with { or [."""
    m = re.search(r'(?m)^[ \t]*((?:\[\s*)?\{\s*")', text)
    return m.start(1) if m else None


def may_become_call(text: str) -> int:
    """For streaming in `auto` mode: the index from which text must be held back because it
    may be (the start of) a tool call; len(text) when all of it is plain content."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return 0
    for marker in _STARTS:
        at = text.find(marker)
        if at >= 0:
            return at
    for k in range(min(len(text), _LONGEST_START), 0, -1):   # a marker may be arriving
        if any(m.startswith(text[-k:]) for m in _STARTS):
            return len(text) - k
    nl = text.rfind("\n")
    if nl >= 0 and text[nl + 1:].lstrip()[:1] in ("{", "["):
        return nl + 1
    return len(text)
