"""The sources a saved reply keeps: the places of the attached files that the server found to
support it (documents/attribution.py; the page shows them under the answer, webui/sources.js).

A reply keeps them as the chat completion gave them, so that a reload, an export and an import
show the same places: [{"file", "file_id", "page", "section", "lines", "label", "quote",
"context", "quote_start", "quote_end", "reply_start", "reply_end", "model_mark", "mark_right"}].
An empty list is kept too (the reply read files and the server found no clear support: nothing
is shown). Offsets count characters (code points), as the server counts them. A bad entry raises
FieldError saying what to fix after the field's name ("[2].page must be ..."); chat_shape puts
the message's name before it.
"""
from __future__ import annotations

import html
import re
from typing import Any

from llmpack.runtime.chats.chat_fields import FieldError, each, fields, text

MAX_SOURCES = 100            # webui/sources.js MAX_SOURCES: one per sentence of a long reply, with room
MAX_SOURCE_TEXT = 20_000     # a place's text (the server's places are chunks of about 1,200 characters)
MAX_NAME = 200
MAX_NUMBER = 10**9
TEXTS = ("file", "label", "quote", "context")
NAMES = ("file_id", "section", "model_mark")
OFFSETS = ("quote_start", "quote_end", "reply_start", "reply_end")


def clean_sources(sources: Any) -> list[dict]:
    """The sources as stored: known fields only, each checked."""
    return each(sources, MAX_SOURCES, "sources", _source)


def _source(s: Any, where: str) -> dict:
    s = fields(s, where)
    out: dict[str, Any] = {}
    for key in TEXTS:
        out[key] = text(s, key, MAX_SOURCE_TEXT if key in ("quote", "context") else MAX_NAME, where)
    for key in NAMES:
        out[key] = text(s, key, MAX_NAME, where, optional=True)
    for key in OFFSETS:
        out[key] = _whole(s.get(key), f"{where}.{key}")
    if out["quote_end"] < out["quote_start"] or out["reply_end"] < out["reply_start"]:
        raise FieldError(f"{where}: an end offset comes before its start")
    out["page"] = None if s.get("page") is None else _whole(s["page"], f"{where}.page")
    lines = s.get("lines")
    if lines is not None and not (isinstance(lines, list) and len(lines) == 2):
        raise FieldError(f"{where}.lines must be [first, last] or null")
    out["lines"] = None if lines is None else [_whole(n, f"{where}.lines") for n in lines]
    mark_right = s.get("mark_right")
    if mark_right is not None and not isinstance(mark_right, bool):
        raise FieldError(f"{where}.mark_right must be true, false or null")
    out["mark_right"] = mark_right
    return out


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NUMBER:
        raise FieldError(f"{where} must be a whole number from 0 to {MAX_NUMBER:,}")
    return value


_MARKDOWN = re.compile(r"([\\`*_\[\]~|])")


def plain(text: str) -> str:
    """`text` from a document or a file name as literal words on one line of a Markdown file: no
    link, picture, emphasis or raw HTML in it is acted on (a CSV cell's `<img onerror>` or
    `[x](javascript:...)`). Markdown's own characters are backslash-escaped and HTML's are
    entities (&lt;), which every renderer shows as the characters; line breaks become spaces,
    so the text cannot start a heading, a list or an HTML block of its own."""
    return html.escape(_MARKDOWN.sub(r"\\\1", " ".join(text.split())), quote=False)


def markdown_lines(sources: list[dict]) -> list[str]:
    """A reply's sources in a Markdown transcript: one line per place, with the sentence that
    supports the reply quoted ("- manual.pdf · p. 97: “The serial number is ...”"), and the
    reply's own page mark where this place contradicts it ("(not [p. 96], as the reply says)"):
    the transcript keeps the reply's words, so the wrong page is named where the right one is."""
    seen: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for s in sources:
        _, wrong = seen.setdefault((s.get("file_id") or s["file"], s["label"]), (s["quote"], []))
        if s.get("mark_right") is False and s.get("model_mark") and s["model_mark"] not in wrong:
            wrong.append(s["model_mark"])
    if not seen:
        return []
    out = ["Sources:", ""]
    for (_, label), (quote, wrong) in seen.items():
        text = plain(quote)   # the document's words, and below the file's name: escaped (issue 46)
        fix = f" (not {', '.join(wrong)}, as the reply says)" if wrong else ""
        out.append(f"- {plain(label)}{fix}: “{text}”" if text else f"- {plain(label)}{fix}")
    return out + [""]
