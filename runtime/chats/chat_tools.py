"""The tool calls a saved reply keeps (the chat page's tool loop, webui/tools.js): the rounds in
which the model asked for tools before it answered, each call with its arguments, its result and
how long it took, so that a reload, an edit, a branch, an export and an import show them and the
chat can go on with them.

    "rounds": [{"content": what the model said before its calls, "calls": [{"id", "name", "tool",
               "server" (null: a built-in tool), "arguments" (JSON text), "result" (text),
               "status", "seconds"}]}]

A result is kept as the text the page showed (it caps results at 16,000 characters; the store
allows a little more). A bad entry raises FieldError saying what to fix after the field's name
("[0].calls[1].status must be ..."); chat_shape puts the message's name before it.
"""
from __future__ import annotations

import math
from typing import Any

from llmpack.runtime.chats.chat_fields import FieldError, each, fields, text

MAX_ROUNDS = 16              # webui/tools.js MAX_ROUNDS is 5
MAX_CALLS = 32               # calls in one round
MAX_NAME = 200
MAX_ARGUMENTS = 64_000
MAX_RESULT = 20_000          # webui/tools.js MAX_RESULT (16,000) and the line that says it was cut
MAX_CONTENT = 100_000
STATUSES = ("ok", "error", "denied", "stopped", "queued", "waiting", "running")   # the last three: saved mid-call


def clean_rounds(rounds: Any) -> list[dict]:
    return each(rounds, MAX_ROUNDS, "rounds", _round)


def _round(r: Any, where: str) -> dict:
    r = fields(r, where)
    content = text(r, "content", MAX_CONTENT, where) if "content" in r else ""
    calls = r.get("calls")
    if not isinstance(calls, list) or not 1 <= len(calls) <= MAX_CALLS:
        raise FieldError(f"{where}.calls must be a list of 1 to {MAX_CALLS} calls")
    return {"content": content, "calls": [_call(c, f"{where}.calls[{k}]") for k, c in enumerate(calls)]}


def _call(c: Any, where: str) -> dict:
    c = fields(c, where)
    out = {"id": text(c, "id", MAX_NAME, where), "name": text(c, "name", MAX_NAME, where),
           "tool": text(c, "tool", MAX_NAME, where), "server": text(c, "server", MAX_NAME, where, optional=True),
           "arguments": text(c, "arguments", MAX_ARGUMENTS, where), "result": text(c, "result", MAX_RESULT, where)}
    if c.get("status") not in STATUSES:
        raise FieldError(f"{where}.status must be one of {', '.join(STATUSES)}")
    out["status"] = c["status"]
    seconds = c.get("seconds", 0)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or not 0 <= seconds <= 1e7:
        raise FieldError(f"{where}.seconds must be a number of seconds from 0 to 10,000,000")
    out["seconds"] = seconds
    return out


def markdown_lines(rounds: list[dict]) -> list[str]:
    """The calls in a Markdown export: one folded block each, arguments and result as text."""
    out: list[str] = []
    for r in rounds:
        if r["content"].strip():
            out += [r["content"].rstrip(), ""]
        for c in r["calls"]:
            who = c["tool"] + (f" ({c['server']})" if c["server"] else "")
            out += [f"<details><summary>Tool: {_escape(who)} · {_escape(c['status'])} · {_escape(str(c['seconds']))} s</summary>", "",
                    "````text", _fence(c["arguments"]), "````", "", "````text", _fence(c["result"]), "````", "",
                    "</details>", ""]
    return out


def _escape(text: str) -> str:
    """Entities only, on one line: a line break would end the HTML block and let the rest be read as Markdown."""
    return " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fence(text: str) -> str:
    return text.replace("````", "` ` ` `")
