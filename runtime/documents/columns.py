"""A two-column PDF page read in reading order.

PDFium reads a page's text in the order its content stream draws it. TeX and most word
processors draw a two-column page column by column, which is already the reading order. Some
producers (tables laid out as columns, newsletters, PDFs re-saved by layout tools) draw it row
by row across both columns, and then every line of the text is half of one sentence and half of
another: a question's words are never in one sentence, and no source can be right.

`reorder` looks at where each piece of text is drawn. Only when the page has two columns (most
of its lines have text on both halves, the right half's starting at one margin) *and* the stream
goes back and forth between them is the page rewritten: the left column top to bottom, then the
right. Every other page keeps PDFium's text as it is: on the corpus's typeset PDFs a looser rule
took a table of input and output (usrguide.pdf p. 21) and code with notes beside it
(clsguide.pdf p. 14) for columns.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

MIN_PIECES = 6        # lines with text on both halves a two-column page has at least
PAIRED_SHARE = 0.6    # ... and at least this share of its lines
EDGE_SHARE = 0.7      # of those, at least this share start the right half at the same x (its margin)
SWITCH_SHARE = 0.3    # the stream crosses between the halves at least this often per piece: interleaved
LINE_PT = 2.0         # pieces whose baselines are this close are one line


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    x: float
    y: float


def reorder_page(textpage, width: float) -> str | None:
    """`reorder` for a page PDFium has read (a pypdfium2 PdfTextPage): its pieces are the runs of
    text PDFium puts in one rectangle, in drawing order. Their text and baselines are asked for
    only when the stream goes back and forth between the halves, which few pages do."""
    rects = [textpage.get_rect(i) for i in range(textpage.count_rects())]
    if not _interleaved([left for left, _, _, _ in rects], width):
        return None
    pieces = []
    for left, bottom, right, top in rects:
        first = textpage.get_index(left + 0.5, (bottom + top) / 2, 1.0, (top - bottom) / 2)
        # the first letter's box as its font sets it, so a line of "gyp" and one of "ace" share a baseline
        base = textpage.get_charbox(first, loose=True)[1] if first is not None else bottom
        text = textpage.get_text_bounded(left, bottom, right, top).replace("\ufffe", "-")   # a line-end hyphen
        pieces.append(Piece(text, left, base))
    return reorder(pieces, width)


def _interleaved(xs: list[float], width: float) -> bool:
    """Whether the stream crosses between the page's halves at least SWITCH_SHARE per piece."""
    if width <= 0 or len(xs) < 2 * MIN_PIECES:
        return False
    middle = width / 2
    side = [x >= middle for x in xs]
    return sum(a != b for a, b in zip(side, side[1:])) >= SWITCH_SHARE * len(xs)


def reorder(pieces: list[Piece], width: float) -> str | None:
    """The page's text in reading order when its stream interleaves two columns; None otherwise
    (keep the extractor's text). Two columns: most lines of the page have text on both halves,
    and the right half's lines all start at one edge (a column's margin; a line drawn word by
    word, or a table's second cell, starts anywhere)."""
    if not _interleaved([p.x for p in pieces], width):
        return None   # drawn column by column (TeX, word processors), or one column: already in reading order
    middle = width / 2
    side = [0 if p.x < middle else 1 for p in pieces]
    lines: dict[int, list[tuple[Piece, int]]] = defaultdict(list)
    for p, s in zip(pieces, side):
        lines[round(p.y / LINE_PT)].append((p, s))
    starts = [round(min(p.x for p, s in line if s) / LINE_PT) for line in lines.values()
              if {0, 1} <= {s for _, s in line}]
    if len(starts) < max(MIN_PIECES, PAIRED_SHARE * len(lines)):
        return None
    if max(starts.count(x) for x in set(starts)) < EDGE_SHARE * len(starts):
        return None
    columns = []
    for col in (0, 1):
        rows = {y: [p for p, s in line if s == col] for y, line in lines.items()}
        columns.append("\n".join(_line(rows[y]) for y in sorted(rows, reverse=True) if rows[y]))
    return "\n\n".join(c for c in columns if c)


def _line(pieces: list[Piece]) -> str:
    out = ""
    for p in sorted(pieces, key=lambda p: p.x):
        text = p.text.strip("\n")
        out += text if not out or out.endswith(" ") or text.startswith(" ") else " " + text
    return out.strip()
