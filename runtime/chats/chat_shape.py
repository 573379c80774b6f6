"""What the chat store accepts: chats (a tree of messages), the page's settings and its presets.
Everything is checked here, before anything is stored, so that nothing the page cannot read back
(Infinity, a time past JavaScript's last date, an integer SQLite cannot hold, a reply whose
parent is missing) is ever stored. Each refusal raises ChatError naming the field.

A chat is {"id", "title", "created", "updated", "mode", "system"?, "leaf"?, "messages": [...]};
times are milliseconds since the epoch (what the page's Date.now() gives). Messages are a tree:
each has an "id" and a "parent" (the id of the message it answers or follows; null for the first),
and a parent always comes before its children in the list. Editing a message or writing a reply
again adds a sibling, so nothing is thrown away; "leaf" names the last message of the branch the
page shows. Chats saved before the tree (no ids) are one branch: the messages in order.
An assistant message may carry "thinking" (a reasoning model's thinking, shown folded, never sent
back), "sources" (the places of the attached files that support it: chat_sources.py) and "rounds"
(the tool calls it made before it answered: chat_tools.py). A user
message's attachments are [{"name", "kind", "size", "tokens", "text", "note"?, "file_id"?, "read"?
("whole": read whole, by its file_id when it has one), "data_url"? (a picture), "audio_url"? (a sound
clip)}]: what was sent, so the chat can be continued and exported as it was.
"""
from __future__ import annotations

import math
import re
import time
from typing import Any

from llmpack.runtime.core.params import scrub   # lone surrogates -> U+FFFD, as requests get
from llmpack.runtime.chats.chat_fields import FieldError
from llmpack.runtime.chats.chat_sources import clean_sources
from llmpack.runtime.chats.chat_tools import clean_rounds

ROLES = ("system", "user", "assistant")
MODES = ("chat", "complete")
MAX_TITLE = 200
MAX_MESSAGES = 10_000
MAX_TIME_MS = 8_640_000_000_000_000   # the last time a JavaScript Date holds; far inside SQLite's int64
MAX_STATS = 32
MAX_STAT_TEXT = 200
MAX_STAT_NUMBER = 1e15
MAX_SYSTEM_PROMPT = 100_000
MAX_PRESETS = 100
MAX_PRESET_NAME = 80
EXPORT_FORMAT = "llmpack-chat"
# The page's per-model settings (settings.js): a system prompt and sampling overrides, each a
# number in the range the page's own form accepts (settings.js FIELDS), or null. (low, high,
# low_open, whole): a whole number must be written without a fraction.
SETTING_NUMBERS: dict[str, tuple[float, float, bool, bool]] = {
    "temperature": (0, 100, False, False), "top_p": (0, 1, True, False), "top_k": (-1, 2**31 - 1, False, True),
    "min_p": (0, 1, False, False), "max_tokens": (1, 2**31 - 1, False, True)}
# What the page does when the next turn would not fit the model's context (settings.js).
CONTEXT_OVERFLOW = ("forget", "ask")
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ChatError(ValueError):
    """A chat the store refuses (bad shape); the message says what to fix."""


def valid_id(chat_id: Any) -> bool:
    return isinstance(chat_id, str) and bool(_ID.fullmatch(chat_id))


def clean_chat(data: Any, *, chat_id: str | None = None) -> dict:
    """The chat as stored: known fields only, types, ranges and the tree's links checked."""
    if not isinstance(data, dict):
        raise ChatError("a chat must be a JSON object")
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) > MAX_MESSAGES:
        raise ChatError(f"'messages' must be a list of at most {MAX_MESSAGES} messages")
    clean = [_message(m, i) for i, m in enumerate(messages)]
    leaf = _links(clean, data.get("leaf"))
    now = int(time.time() * 1000)
    title = scrub(data["title"]) if isinstance(data.get("title"), str) else ""
    created = _time(data, "created", now)
    updated = _time(data, "updated", created)
    mode = data.get("mode") if data.get("mode") in MODES else "chat"
    system = data.get("system")
    if system is not None and (not isinstance(system, str) or len(system) > MAX_SYSTEM_PROMPT):
        raise ChatError(f"'system' must be text of at most {MAX_SYSTEM_PROMPT} characters, or null")
    chat = {"id": chat_id or data.get("id"), "title": (title.strip() or "Chat")[:MAX_TITLE], "mode": mode,
            "created": created, "updated": updated, "messages": clean}
    if leaf is not None:
        chat["leaf"] = leaf
    if system is not None:
        chat["system"] = scrub(system)
    return chat


def _message(m: Any, i: int) -> dict:
    if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
        raise ChatError(f"messages[{i}] must be {{\"role\": one of {', '.join(ROLES)}, \"content\": text}}")
    item: dict[str, Any] = {}
    if "id" in m:
        if not valid_id(m["id"]):
            raise ChatError(f"messages[{i}].id must be 1-64 letters, digits, '-' or '_'")
        item["id"] = m["id"]
        item["parent"] = m.get("parent")
    item.update(role=m["role"], content=scrub(m["content"]))
    if m.get("stats") is not None:
        item["stats"] = _stats(m["stats"], f"messages[{i}].stats")
    if m.get("attachments"):
        item["attachments"] = _clean_attachments(m["attachments"], i)
    if m.get("thinking") and m["role"] == "assistant":   # a reasoning model's thinking, shown folded
        if not isinstance(m["thinking"], str):
            raise ChatError(f"messages[{i}].thinking must be text")
        item["thinking"] = scrub(m["thinking"])
    if m.get("sources") is not None and m["role"] == "assistant":   # the server's sources (chat_sources.py)
        try:
            item["sources"] = clean_sources(m["sources"])
        except FieldError as exc:
            raise ChatError(f"messages[{i}].sources{exc}") from None
    if m.get("rounds") and m["role"] == "assistant":   # the tool calls before the answer (chat_tools.py)
        try:
            item["rounds"] = clean_rounds(m["rounds"])
        except FieldError as exc:
            raise ChatError(f"messages[{i}].rounds{exc}") from None
    return item


def _links(messages: list[dict], leaf: Any) -> str | None:
    """Check the tree: every message has an id or none has (a chat from before the tree), ids are
    unique, each parent comes earlier in the list. Returns the leaf (the last message unless
    `leaf` names another); None for a chat without ids."""
    with_ids = sum("id" in m for m in messages)
    if with_ids == 0:
        if leaf is not None:
            raise ChatError("'leaf' needs messages with ids")
        return None
    if with_ids != len(messages):
        raise ChatError("either every message has an 'id' or none has")
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if m["id"] in seen:
            raise ChatError(f"messages[{i}].id {m['id']!r} is used twice")
        if m["parent"] is not None and m["parent"] not in seen:
            raise ChatError(f"messages[{i}].parent must be null or the id of an earlier message")
        seen.add(m["id"])
    if leaf is None:
        return messages[-1]["id"] if messages else None
    if leaf not in seen:
        raise ChatError("'leaf' must be the id of one of the messages")
    return leaf


def branch(chat: dict) -> list[dict]:
    """The messages of the branch shown, first to last: from the leaf up through the parents
    (every message, in order, for a chat without ids)."""
    messages = chat["messages"]
    if not messages or "id" not in messages[0]:
        return list(messages)
    by_id = {m["id"]: m for m in messages}
    out, at = [], by_id.get(chat.get("leaf") or messages[-1]["id"])
    while at is not None:
        out.append(at)
        at = by_id.get(at["parent"]) if at["parent"] is not None else None
    return out[::-1]


def merge_messages(saved: list[dict], incoming: list[dict]) -> list[dict] | None:
    """The union of two trees of one chat, for a save that must not be refused (a page's last
    save as it closes): the saved messages in their order, then the incoming ones the saved copy
    lacks. Of a message both have, the saved copy stays, except a reply the incoming side was
    still writing (marked interrupted), which only that side has the latest text of. None when
    either side is a chat without ids (nothing to match them by)."""
    if not saved or not incoming or "id" not in saved[0] or "id" not in incoming[0]:
        return None
    mine = {m["id"]: m for m in incoming}
    out = [mine[m["id"]] if (m["id"] in mine and _writing(mine[m["id"]])) else m for m in saved]
    known = {m["id"] for m in saved}
    return out + [m for m in incoming if m["id"] not in known]


def _writing(m: dict) -> bool:
    return m["role"] == "assistant" and (m.get("stats") or {}).get("finish") == "interrupted"


def search_text(chat: dict) -> str:
    """What search finds a chat by besides its title: every message of every branch."""
    return "\n\n".join(m["content"] for m in chat["messages"])


def _number(value: Any) -> bool:
    """A JSON number that is finite (json.loads reads 1e400 as inf); true/false are not numbers."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))   # 10**400 is an int


def _time(data: dict, key: str, default: int) -> int:
    value = data.get(key)
    if value is None:
        return default
    if not _number(value) or not 0 <= value <= MAX_TIME_MS:
        raise ChatError(f"'{key}' must be a time in milliseconds since 1970, from 0 to {MAX_TIME_MS}")
    return int(value)


def _stats(stats: Any, where: str) -> dict:
    """A reply's statistics as the page shows them: a few flat numbers, flags and words."""
    if not isinstance(stats, dict) or len(stats) > MAX_STATS:
        raise ChatError(f"{where} must be an object of at most {MAX_STATS} entries")
    for key, value in stats.items():
        ok = (value is None or isinstance(value, bool) or (_number(value) and abs(value) <= MAX_STAT_NUMBER)
              or (isinstance(value, str) and len(value) <= MAX_STAT_TEXT))
        if len(key) > MAX_STAT_TEXT or not ok:
            raise ChatError(f"{where}.{key[:40]} must be a number of at most {MAX_STAT_NUMBER:.0e}, "
                            f"true/false, null or text of at most {MAX_STAT_TEXT} characters")
    return {scrub(k): (scrub(v) if isinstance(v, str) else v) for k, v in stats.items()}


def _clean_attachments(files: Any, i: int) -> list[dict]:
    if not isinstance(files, list) or len(files) > 32:
        raise ChatError(f"messages[{i}].attachments must be a list of at most 32 files")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("text"), str):
            raise ChatError(f"messages[{i}].attachments entries need 'name' and 'text' strings")
        item = {"name": scrub(f["name"][:MAX_TITLE]), "text": scrub(f["text"])}
        item.update({k: _kept_url(f[k], i, k) for k in _KEPT_URLS if f.get(k) is not None})   # a picture, a clip
        item.update({k: scrub(f[k][:MAX_STAT_TEXT]) for k in ("kind", "note", "file_id", "read") if isinstance(f.get(k), str)})
        for k in ("size", "tokens"):
            if f.get(k) is None:
                continue
            if not _number(f[k]) or not 0 <= f[k] <= MAX_STAT_NUMBER:
                raise ChatError(f"messages[{i}].attachments[].{k} must be a number from 0 to {MAX_STAT_NUMBER:.0e}")
            item[k] = int(f[k])
        out.append(item)
    return out


# A picture or sound clip kept in a saved chat, as the page sends it: a data: URL of up to this many
# bytes, of an image type the model reads (webui/attach.js scales photos down to 1536 px JPEGs), or
# a WAV (webui/audio.js: 16 kHz mono 16-bit, at most 90 s, about 2.9 MB).
MAX_PICTURE_URL = MAX_CLIP_URL = 4 * 1024 * 1024
_KEPT_URLS = {"data_url": (re.compile(r"data:image/(png|jpeg|webp|gif);base64,[A-Za-z0-9+/]*={0,2}"),
                           MAX_PICTURE_URL, "a PNG, JPEG, WebP or GIF"),
              "audio_url": (re.compile(r"data:audio/wav;base64,[A-Za-z0-9+/]*={0,2}"), MAX_CLIP_URL, "a WAV")}


def _kept_url(url: Any, i: int, key: str) -> str:
    pattern, limit, what = _KEPT_URLS[key]
    if not isinstance(url, str) or len(url) > limit or not pattern.fullmatch(url):
        raise ChatError(f"messages[{i}].attachments[].{key} must be {what} data: URL of at most {limit >> 20} MB")
    return url


def clean_settings(data: Any) -> dict:
    """Known keys only: system_prompt (text), the sampling numbers (a number, or null for "no
    limit" / the model's default), context_overflow ("forget" or "ask"). Raises ChatError."""
    if not isinstance(data, dict):
        raise ChatError("settings must be a JSON object")
    out: dict[str, Any] = {}
    prompt = data.get("system_prompt")
    if prompt is not None:
        if not isinstance(prompt, str) or len(prompt) > MAX_SYSTEM_PROMPT:
            raise ChatError(f"system_prompt must be text of at most {MAX_SYSTEM_PROMPT} characters")
        out["system_prompt"] = scrub(prompt)
    for key, (low, high, low_open, whole) in SETTING_NUMBERS.items():
        if key in data:
            out[key] = _setting(key, data[key], low, high, low_open, whole)
    overflow = data.get("context_overflow")
    if overflow is not None:
        if overflow not in CONTEXT_OVERFLOW:
            raise ChatError(f"context_overflow must be one of {', '.join(CONTEXT_OVERFLOW)}")
        out["context_overflow"] = overflow
    return out


def _setting(key: str, value: Any, low: float, high: float, low_open: bool, whole: bool) -> Any:
    if value is None:
        return None
    in_range = _number(value) and (low < value if low_open else low <= value) and value <= high
    if not in_range or (whole and not float(value).is_integer()):
        kind = "a whole number" if whole else "a number"
        raise ChatError(f"{key} must be {kind} {'above' if low_open else 'from'} {low} to {high}, or null")
    return int(value) if whole else value


def clean_presets(data: Any) -> list[dict]:
    """Named presets: [{"name", "system_prompt"?, sampling numbers?}], names unique. The built
    file's own system prompt is not among them: the page shows it first, from /health."""
    presets = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(presets, list) or len(presets) > MAX_PRESETS:
        raise ChatError(f"'presets' must be a list of at most {MAX_PRESETS} presets")
    out, names = [], set()
    for i, p in enumerate(presets):
        name = p.get("name") if isinstance(p, dict) else None
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_PRESET_NAME:
            raise ChatError(f"presets[{i}].name must be text of 1 to {MAX_PRESET_NAME} characters")
        name = scrub(name.strip())
        if name.casefold() in names:
            raise ChatError(f"presets[{i}].name {name!r} is used twice")
        names.add(name.casefold())
        try:
            values = clean_settings({k: v for k, v in p.items() if k != "name"})
        except ChatError as exc:
            raise ChatError(f"presets[{i}].{exc}") from None
        values.pop("context_overflow", None)   # how the page handles long chats is not part of a preset
        out.append({"name": name, **values})
    return out
