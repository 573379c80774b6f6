"""A document too long for the model's context, cut into pieces that each say where they came from.

Each piece (`Chunk`) is at most `CHUNK_CHARS` characters (about 300 tokens of English), cut at a
paragraph, else a line, else a sentence, else a word, and never across the unit a reader cites:

- a PDF page: every chunk lies on one page and is labelled "p. 217";
- a DOCX or Markdown section: every chunk lies under one heading and is labelled with it
  ("§ 12. Termination"); its `heading` holds the path of headings above it, which the index also
  searches, so a question that names a section finds its text;
- plain text with no headings: "lines 120-161", so a reply can still point into the file.

Why this size: small enough that a 2,000-token budget holds several places in the document
(a question's answer and its neighbours), large enough that a sentence keeps its context. The
benchmark (benchmarks/retrieval.py) measures hit rate at this size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from llmpack.runtime.documents import layout
from llmpack.runtime.documents.extract import Document

CHUNK_CHARS = 1200
MIN_CHUNK_CHARS = 200          # a section's tail shorter than this joins the chunk before it (same unit only)
MAX_CHUNKS = 50_000            # 4,000,000 characters (extract.MAX_TEXT_CHARS) / CHUNK_CHARS, with room
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
_FENCE = re.compile(r"^(```|~~~)", re.M)
_LINES = re.compile(r"^lines? (\d+)(?:-(\d+))?")


@dataclass(frozen=True, slots=True)
class Chunk:
    ord: int            # position in the document, from 0
    label: str          # what a reply cites: "p. 217", "§ Termination", "lines 120-161"
    text: str
    page: int = 0       # PDF page, from 1; 0 when the document has no pages
    heading: str = ""   # "Contract > 12. Termination": the headings above this text, outermost first


def chunk(doc: Document) -> list[Chunk]:
    """The pieces of `doc`, in document order."""
    if doc.pages:
        pieces = [(f"p. {n}", text, n, "") for n, page in enumerate(doc.pages, 1) for text in split(page)]
    else:
        headings = doc.headings or (_markdown_headings(doc.text) if _looks_markdown(doc) else [])
        pieces = _by_heading(doc.text, headings) if headings else _by_lines(doc.text)
    return [Chunk(i, label, text, page, heading) for i, (label, text, page, heading) in enumerate(pieces[:MAX_CHUNKS])]


def split(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """`text` in pieces of at most `size` characters (see `spans`), each stripped."""
    return [text[a:b] for a, b in spans(text, size)]


def spans(text: str, size: int = CHUNK_CHARS) -> list[tuple[int, int]]:
    """(start, end) of the pieces of `text`, at most `size` characters each, cut at the largest
    boundary that fits: a blank line, a line break, a sentence end, a space; before a heading
    rather than after it (`_before_heading`). No piece is empty
    or starts or ends with white space; a last piece shorter than MIN_CHUNK_CHARS joins the one
    before it."""
    out: list[tuple[int, int]] = []
    start, end = _skip(text, 0), len(text.rstrip())
    while end - start > size:
        cut = _before_heading(text, start, start + _cut_at(text[start:start + size + 1], size), size)
        out.append((start, len(text[:cut].rstrip())))
        start = _skip(text, cut)
    if start < end:
        if out and end - start < MIN_CHUNK_CHARS:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _before_heading(text: str, start: int, cut: int, size: int) -> int:
    """`cut`, or the start of the heading the piece would end with ("3.5 Conditional Compilation",
    underlined or not), so that a heading begins the piece that holds its section: cut after it,
    the section's first sentences went to the next chunk and a question that matched the heading
    read the heading alone (the GNU standards' "prefer if statements" question)."""
    lines = text[start:cut].rstrip().split("\n")
    k = len(lines) - 1
    if k >= 1 and layout.is_underline(lines[k]):
        k -= 1
    heading = layout.is_heading(lines[k], lines[k + 1] if k + 1 < len(lines) else "")
    at = start + sum(len(line) + 1 for line in lines[:k])
    return at if heading and at - start > size // 3 else cut


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _cut_at(window: str, size: int) -> int:
    for sep in ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " "):
        at = window.rfind(sep, size // 3)
        if at > 0:
            return at + len(sep)
    return size


def _looks_markdown(doc: Document) -> bool:
    name = doc.name.lower()
    return name.endswith((".md", ".markdown", ".mdown", ".mkd", ".rst", ".txt")) or bool(_MD_HEADING.search(doc.text))


def _markdown_headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of each ATX heading ("## Title") outside fenced code blocks."""
    fences = [m.start() for m in _FENCE.finditer(text)]
    out = []
    for m in _MD_HEADING.finditer(text):
        if sum(1 for f in fences if f < m.start()) % 2:   # inside ``` ... ```: a comment, not a heading
            continue
        out.append((m.start(), len(m.group(1)), m.group(2).strip()))
    return out


def _by_heading(text: str, headings: list[tuple[int, int, str]]) -> list[tuple[str, str, int, str]]:
    """Sections between headings, each split; the text before the first heading is its own section."""
    pieces: list[tuple[str, str, int, str]] = []
    path: list[tuple[int, str]] = []   # the open headings: (level, title)
    starts = ([(0, 0, "")] if headings[0][0] > 0 else []) + list(headings)
    for i, (start, level, title) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        if title:
            path = [p for p in path if p[0] < level] + [(level, title)]
        trail = " > ".join(t for _, t in path)
        label = f"§ {_short(path[-1][1])}" if path else "the beginning"
        pieces += [(label, piece, 0, trail) for piece in split(text[start:end])]
    return pieces


def _by_lines(text: str) -> list[tuple[str, str, int, str]]:
    pieces = []
    for a, b in spans(text):
        first = text.count("\n", 0, a) + 1
        last = first + text.count("\n", a, b)
        pieces.append((f"line {first}" if first == last else f"lines {first}-{last}", text[a:b], 0, ""))
    return pieces


def line_range(label: str) -> tuple[int, int]:
    """(first, last) line a label names ("lines 120-161", "line 7", as `_by_lines` writes them);
    (0, 0) for any other label."""
    m = _LINES.match(label)
    return (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, 0)


def _short(title: str, limit: int = 60) -> str:
    return title if len(title) <= limit else title[:limit - 1].rstrip() + "…"
