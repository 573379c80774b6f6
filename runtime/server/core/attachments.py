"""Documents attached to a request: the page's POST /v1/extract (page/extract_routes.py) asks
`describe` for a file's text and token counts per page (PDF) or per part, so it can show how much
of the context the file takes and offer the first N pages; a chat request's `file` content parts
(OpenAI's {"type": "file", "file": {"filename", "file_data": "data:...;base64,..."}}) become the
user message's text in `expand_file_parts`.

Both run `documents.extract` on a small pool of worker threads (never the engine thread, at
most two files at a time), give up after `documents.TIME_LIMIT_S`, and refuse what cannot be
read with one line (HTTP 400, code `unreadable_file`; 413 for a file over the size limit).
In a chat request the documents join the user's message in `documents.format_message`'s shape,
and together they may take at most `budget(n_ctx)` tokens (code `attachments_too_long`).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from llmpack.runtime.server.core.errors import ApiError, bad
from llmpack.runtime.server.core.served_model import ServedModel
from llmpack.runtime.server.documents import extract as D

ATTACH_BODY = D.MAX_FILE_BYTES * 4 // 3 + 4 * 1024 * 1024   # a base64 file in a JSON body, plus the chat
SEGMENT_CHARS = 4000      # non-PDF text is offered for cutting in parts of about this size
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="llmpack-extract")


def budget(n_ctx: int) -> int:
    """Tokens the attachments of one request may take: the context less room for the rest of
    the conversation and the reply (1024 tokens, or half of a small context)."""
    return max(n_ctx - 1024, n_ctx // 2)


class _Cache:
    """The last few extractions by content, so a chat that re-sends its documents every turn
    does not re-read them."""

    def __init__(self, size: int = 8) -> None:
        self._items: OrderedDict[bytes, D.Document] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key: bytes) -> D.Document | None:
        with self._lock:
            doc = self._items.get(key)
            if doc is not None:
                self._items.move_to_end(key)
            return doc

    def put(self, key: bytes, doc: D.Document) -> None:
        with self._lock:
            self._items[key] = doc
            while len(self._items) > self._size:
                self._items.popitem(last=False)


_CACHE = _Cache()


def extract(name: str, data: bytes, media_type: str = "") -> D.Document:
    """documents.extract on the worker pool, within the time limit; ApiError when it fails."""
    key = hashlib.sha256(name.encode("utf-8", "replace") + b"\0" + media_type.encode() + b"\0" + data).digest()
    doc = _CACHE.get(key)
    if doc is not None:
        return doc
    deadline = time.monotonic() + D.TIME_LIMIT_S
    future = _POOL.submit(D.extract, name, data, deadline=deadline, media_type=media_type)
    try:
        doc = future.result(timeout=D.TIME_LIMIT_S + 5)
    except FutureTimeout:   # the worker stops at its next deadline check
        raise ApiError(400, f"reading {name} took longer than {D.TIME_LIMIT_S:.0f} s, so llmpack gave up; attach "
                            "a smaller file or copy its text in", param="file", code="unreadable_file") from None
    except D.DocumentError as exc:
        status = 413 if len(data) > D.MAX_FILE_BYTES else 400
        raise ApiError(status, str(exc), param="file", code="unreadable_file") from None
    _CACHE.put(key, doc)
    return doc


def _tokens(model: ServedModel, text: str) -> int:
    return len(model.engine.tokenize(text, add_special=False, parse_special=False)) if text else 0


def segments(doc: D.Document) -> list[str]:
    """The pieces the page may cut a document at: PDF pages, else parts of about
    SEGMENT_CHARS ending at a line break."""
    if doc.pages:
        return doc.pages
    out, start, text = [], 0, doc.text
    while start < len(text):
        end = min(len(text), start + SEGMENT_CHARS)
        if end < len(text):
            nl = text.rfind("\n", start + SEGMENT_CHARS // 2, end)
            end = nl + 1 if nl >= 0 else end
        out.append(text[start:end])
        start = end
    return out


def describe(doc: D.Document, model: ServedModel) -> dict:
    """What the page shows and needs to fit a document into the context."""
    parts = segments(doc)
    counts = [_tokens(model, p) for p in parts]
    heading = _tokens(model, D.format_message([(doc.name, "")], ""))
    return {"name": doc.name, "kind": doc.kind, "size": doc.size, "text": doc.text,
            "tokens": heading + sum(counts), "unit": "page" if doc.pages else "part",
            # chars in UTF-16 units: what JavaScript's String.slice counts, to cut at a page
            "segments": [{"chars": len(p.encode("utf-16-le")) // 2, "tokens": n} for p, n in zip(parts, counts)],
            "budget": budget(model.n_ctx), "n_ctx": model.n_ctx}


# ---------------------------------------------------------------- file parts in chat requests
def expand_file_parts(messages: Any, model: ServedModel) -> Any:
    """`messages` with every user message that has `file` parts turned into one text: its
    documents (format_message), then its text parts. Other messages are returned as they are."""
    if not isinstance(messages, list):
        return messages
    out, used, names = [], 0, []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "file" for p in content):
            out.append(m)
            continue
        if m.get("role") != "user":
            raise bad("messages", f"messages[{i}] has a file part; files can only be attached to user messages")
        docs, texts = [], []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "file":
                doc = _file_part(part.get("file"), f"messages[{i}].content[{j}]")
                docs.append((doc.name, doc.text))
                used += _tokens(model, D.format_message([(doc.name, doc.text)], ""))
                names.append(doc.name)
            else:
                raise bad("messages", f"messages[{i}].content[{j}] must be a text or file part"
                          + (" (images need a vision model, which llmpack does not serve yet)"
                             if kind == "image_url" else ""))
        out.append({**m, "content": D.format_message(docs, "\n\n".join(texts))})
    limit = budget(model.n_ctx)
    if used > limit:
        raise bad("messages", f"the attached files ({', '.join(names)}) take {used:,} tokens, but this model's "
                              f"{model.n_ctx:,}-token context leaves {limit:,} for files: send fewer pages or a "
                              "shorter file", "attachments_too_long")
    return out


def _file_part(spec: Any, where: str) -> D.Document:
    if not isinstance(spec, dict):
        raise bad("messages", f"{where} must be {{\"type\": \"file\", \"file\": {{\"filename\": ..., "
                              "\"file_data\": \"data:...;base64,...\"}}")
    if spec.get("file_id") is not None and spec.get("file_data") is None:
        raise bad("messages", f"{where}: uploaded files (file_id) are not kept by this server; send the file "
                              "itself as file_data")
    name, data_url = spec.get("filename") or "attachment", spec.get("file_data")
    if not isinstance(name, str) or not isinstance(data_url, str):
        raise bad("messages", f"{where}.file needs 'filename' and 'file_data' strings")
    head, sep, payload = data_url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise bad("messages", f"{where}.file.file_data must be a data URL: data:MEDIA/TYPE;base64,...")
    if len(payload) > ATTACH_BODY:
        raise ApiError(413, f"{name} is larger than {D.MAX_FILE_BYTES >> 20} MB; attach a shorter part of it",
                       param="messages", code="unreadable_file")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise bad("messages", f"{where}.file.file_data is not valid base64") from None
    return extract(name, data, head[5:-7].lower())
