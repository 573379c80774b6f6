"""Documents attached to a request: the page's POST /v1/extract (page/extract_routes.py) asks
`describe` for a file's text and token counts per page (PDF) or per part, so it can show how much
of the context the file takes and offer the first N pages; a chat request's `file` content parts
(OpenAI's {"type": "file", "file": {"filename", "file_data": "data:...;base64,..."}}) become the
user message's text in `expand_file_parts`: {"filename", "file_data", "file_id"?, "read"?: "auto" |
"whole" | "excerpts"}. Every file the page attaches is kept in the index (documents/index.py, once
per content: `describe` answers its `file_id`, which the page sends instead of the file from then
on); a file too long for the context is searched: the latest question reads the parts of it that
fit (documents/reading.py), or, asked about the whole file, the summaries of all its parts
(documents/overview.py, core/summaries.py); `expand_file_parts` says
which, for the response's `X-Llmpack-Read` header (READ_HEADER), and what the model was given,
so the reply can be attributed to its places (documents/attribution.py: the `sources` field).

Both run `documents.extract` in the app's worker processes (core/files.py holds them, the index
and the last reads; documents/sandbox.py: at most two files at a time, each worker killed at
`documents.TIME_LIMIT_S`, under a memory limit), and refuse what
cannot be read with one line (HTTP 400, code `unreadable_file`; 413 for a file over the size limit).
In a chat request the documents join the user's message in `documents.format_message`'s shape,
and together they may take at most `budget(n_ctx)` tokens; `"read": "whole"` keeps that rule
(400 `attachments_too_long`), the default `"auto"` searches what does not fit.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from llmpack.runtime.chat import untrusted
from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.files import AppFiles
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.core.summaries import EngineSummariser
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import reading as Rd
from llmpack.runtime.documents.attribution import Attribution
from llmpack.runtime.documents.index import IndexUnusable

ATTACH_BODY = D.MAX_FILE_BYTES * 4 // 3 + 4 * 1024 * 1024   # a base64 file in a JSON body, plus the chat
SEGMENT_CHARS = 4000      # non-PDF text is offered for cutting in parts of about this size
READ_HEADER = "X-Llmpack-Read"


def budget(n_ctx: int) -> int:
    """Tokens the attachments of one request may take: the context less room for the rest of
    the conversation and the reply (1024 tokens, or half of a small context)."""
    return max(n_ctx - 1024, n_ctx // 2)


def extract(name: str, data: bytes, media_type: str = "", *, files: AppFiles) -> D.Document:
    """documents.extract in one of the app's sandboxed workers, within the time limit (the app's
    last few reads are kept by content: a chat re-sends its documents every turn); ApiError when it fails."""
    key = hashlib.sha256(name.encode("utf-8", "replace") + b"\0" + media_type.encode() + b"\0" + data).digest()
    doc = files.read.get(key)
    if doc is not None:
        return doc
    try:
        if len(data) > D.MAX_FILE_BYTES:   # refused at once, without a trip to a worker
            doc = D.extract(name, data, media_type=media_type)
        else:
            doc = files.sandbox.extract(name, data, media_type=media_type)
    except D.DocumentError as exc:
        status = 413 if len(data) > D.MAX_FILE_BYTES else 400
        raise ApiError(status, str(exc), param="file", code="unreadable_file") from None
    files.read.put(key, doc)
    return doc


STAND_IN_TOKENS = 40      # what a searched file's one-line stand-in costs, counted generously (the page's meter)


def limits(model: ServedModel) -> dict:
    """What the chat page shares with the server about files, served in /health's `attachments`
    so the page never keeps a copy of these numbers."""
    return {"max_file_bytes": D.MAX_FILE_BYTES, "budget": budget(model.n_ctx), "stand_in_tokens": STAND_IN_TOKENS,
            "first_word_s": Rd.FIRST_WORD_S}


def prompt_speed(model: ServedModel) -> float:
    """The engine's measured prompt speed, tokens a second (EngineStats.prompt_tok_s, measured by
    the scheduler's step costs); 0 before it has measured one."""
    try:
        return float(getattr(model.engine.stats(), "prompt_tok_s", 0.0) or 0.0)
    except Exception:  # noqa: BLE001 - a stopped engine: nothing measured
        return 0.0


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
    """What the page shows and needs to fit a document into the context. Every document is
    kept in the index and comes back with its `file_id`, which the page sends in its place from
    then on (read whole from the index's copy, or searched); one too long for the context, or
    too slow to read whole, also comes back `searched: true`."""
    parts = segments(doc)
    counts = [_tokens(model, p) for p in parts]
    heading = _tokens(model, D.format_message([(doc.name, "")], ""))
    out = {"name": doc.name, "kind": doc.kind, "size": doc.size, "text": doc.text,
           "tokens": heading + sum(counts), "unit": "page" if doc.pages else "part",
           # chars in UTF-16 units: what JavaScript's String.slice counts, to cut at a page
           "segments": [{"chars": len(p.encode("utf-16-le")) // 2, "tokens": n} for p, n in zip(parts, counts)],
           "budget": budget(model.n_ctx), "n_ctx": model.n_ctx, "searched": False}
    # the wait for a first word if it is read whole, at the engine's measured prompt speed: over
    # FIRST_WORD_S, `auto` searches it (documents/reading.py) and the page offers to read it whole
    out["whole_s"] = round(out["tokens"] / (prompt_speed(model) or Rd.UNMEASURED_TOK_S), 1)
    out["first_word_s"] = Rd.FIRST_WORD_S
    slow = out["whole_s"] > Rd.FIRST_WORD_S
    searched = out["tokens"] > out["budget"] or slow
    index = model.files.index
    try:
        indexed = index.add(doc, model.model_key)
    except IndexUnusable as exc:
        if searched:   # it cannot be read without the index
            raise ApiError(500, str(exc), param="file", code="document_index_failed", type="server_error") from None
        return out     # no file_id: the page sends its text, as for a file read before the index kept short ones
    out["file_id"] = indexed.id
    if searched:   # "long": only its parts fit; "slow": it fits, but read whole the first word would wait whole_s
        out.update(searched=True, chunks=indexed.chunks, why="long" if out["tokens"] > out["budget"] else "slow")
    if indexed.forgot:   # the page says which files the index forgot to make room, and why
        out.update(forgot=list(indexed.forgot), index_cap=index.max_bytes)
    return out


def _indexed(fn):
    try:
        return fn()
    except IndexUnusable as exc:
        raise ApiError(500, str(exc), param="file", code="document_index_failed", type="server_error") from None


# ---------------------------------------------------------------- file parts in chat requests
def expand_file_parts(messages: Any, model: ServedModel) -> tuple[Any, list[dict], Attribution]:
    """(`messages` with every user message that has `file` parts turned into one text, what was
    read of each searched file, the places the model was given to attribute its reply to).
    Messages without file parts are returned as they are."""
    nothing = Attribution([])
    if not isinstance(messages, list):
        return messages, [], nothing
    found: list[Rd.FileMessage] = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "file" for p in content):
            continue
        if m.get("role") != "user":
            raise bad("messages", f"messages[{i}] has a file part; files can only be attached to user messages")
        files, texts = [], []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "file":
                files.append(_file_part(part.get("file"), f"messages[{i}].content[{j}]", model.files))
            else:
                raise bad("messages", f"messages[{i}].content[{j}] must be a text, file or image_url part")
        found.append(Rd.FileMessage(i, files, "\n\n".join(texts)))
    if not found:
        return messages, [], nothing
    try:
        done = _indexed(lambda: Rd.arrange(messages, found, budget=budget(model.n_ctx), index=model.files.index,
                                            count=lambda text: _tokens(model, text), owner=model.model_key,
                                            prompt_tok_s=prompt_speed(model),
                                            summariser=EngineSummariser(model, model.files.rounds)))
    except Rd.ReadingError as exc:
        raise bad("messages", str(exc), exc.code) from None
    # what files brought in is text, never control tokens (chat/untrusted.py): each message the
    # files were written into is marked whole (the person's own words in it are plain text too)
    marked = [{**m, "content": untrusted.mark(m["content"])} if m is not messages[i] else m
              for i, m in enumerate(done.messages)]
    return marked, done.reports, done.attribution


def _file_part(spec: Any, where: str, app: AppFiles) -> Rd.Attached:
    if not isinstance(spec, dict):
        raise bad("messages", f"{where} must be {{\"type\": \"file\", \"file\": {{\"filename\": ..., "
                              "\"file_data\": \"data:...;base64,...\"}}")
    mode = spec.get("read", "auto")
    if mode not in Rd.READ_MODES:
        raise bad("messages", f"{where}.file.read must be one of {', '.join(Rd.READ_MODES)}")
    file_id, data_url = spec.get("file_id"), spec.get("file_data")
    indexed = app.index.get(file_id) if isinstance(file_id, str) and file_id.startswith("doc-") else None
    if file_id is not None and data_url is None:
        # read whole by its file_id: the index's copy of the file as it was read (its pages, its headings)
        doc = _indexed(lambda: app.index.document(indexed.id)) if indexed is not None and mode == "whole" else None
        if indexed is None or (mode == "whole" and doc is None):
            # the page asks for the file again (code file_not_indexed): the same content indexed
            # anew gets the same file_id, so the chat's earlier turns find it again
            name = spec.get("filename") if isinstance(spec.get("filename"), str) else "the file"
            why = ("--forget removes it, a full index forgets the files used longest ago, and files are not uploaded "
                   "ahead here") if indexed is None else "an earlier release kept only its parts, which can be searched"
            raise bad("messages", f"{where}.file.file_id {str(file_id)[:80]!r} (\"{name[:200]}\") is no longer in this "
                                  f"computer's document index{' whole' if indexed is not None else ''} ({why}): send "
                                  "the file itself as file_data", "file_not_indexed")
        return Rd.Attached(spec.get("filename") if isinstance(spec.get("filename"), str) else indexed.name,
                           mode, doc, indexed)
    name = spec.get("filename") or "attachment"
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
    return Rd.Attached(name, mode, extract(name, data, head[5:-7].lower(), files=app), indexed)
