"""An HTML file read as a browser shows it: its text, paragraph by paragraph, with its headings.

Why: HTML used to be read as it is, markup and all. A page of the SQLite documentation
(lang_select.html, 1.6 MB of inline SVG diagrams around 36 KB of text) counted 916,086 tokens and
was searched for words inside path data; a 22 KB page had its menu, scripts and style sheet read
beside the text, and its sources named lines of the markup (docs/BENCHMARKS.md, "HTML pages").
Saved web pages, exported help, wiki and note exports are what people attach; what they ask
about is what the page says.

What is read:
- Text outside `<script>`, `<style>`, `<svg>`, `<template>`, `<noscript>`, `<nav>`, `<select>`,
  iframes and objects, and outside elements marked `hidden`, `aria-hidden="true"` or
  `role="navigation"` (a menu, as `<nav>` is); no "¶" permalink at a line's end.
- The page's `<title>` first, a level-1 heading when the body has no `<h1>` of its own.
- One paragraph a line: a block element (`<p>`, `<div>`, `<li>`, a table row ...) starts a new
  line, white space inside it collapses to one space, `<br>` breaks the line, `<pre>` keeps its
  lines as written.
- `<h1>`-`<h6>` as headings (offset, level, title), as a DOCX's heading styles are
  (documents/chunks.py cuts sections at them and names a source by its section).
- An exponent after a digit as "2^31", not "231".
- List items as "- item", or "1) item" in an ordered list (not "1. item": three numbered lines in a
  row are a table of contents to documents/layout.py); a table row's cells joined by " | ", a
  table's line documents/layout.py keeps as a record, each cell under its column's name
  ("Resulting Affinity: TEXT") when a header row of `<th>` cells names them (a name longer than
  MAX_NAME is left out).

To read the markup itself (a page's source code), attach it as text: a file sent as text/plain is
read as it is (documents/extract.py).
"""
from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from html.parser import HTMLParser

EXTENSIONS = (".html", ".htm", ".xhtml", ".shtml")
MEDIA_TYPES = ("text/html", "application/xhtml+xml")
FEED_CHARS = 1 << 16     # characters parsed between two checks of the deadline and the text limit

_SKIP = frozenset({"script", "style", "svg", "template", "noscript", "nav", "select", "datalist", "iframe",
                   "object", "canvas", "audio", "video", "map", "button"})
# elements that end the line before them and after them (the rest are inline: <a>, <b>, <span> ...)
_BLOCK = frozenset({"address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details",
                    "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
                    "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "html", "legend", "li", "main",
                    "menu", "ol", "p", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
                    "title", "option", "label", "textarea"})
_CELL = frozenset({"td", "th"})
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
                   "track", "wbr", "keygen"})
_HEADING = re.compile(r"h([1-6])$")
_MARKER = re.compile(r"\s*(?:- |\d+\) )\s*")            # a list item's mark, written by _PageText
_MARKER_START = re.compile(r"^(?:- |\d+\) )")
_END = re.compile(r"[.!;,:。！：]\W*$")   # a bold line ending so is a sentence or a label ("Note:"); "?" ends a FAQ's heading
MAX_NAME = 50            # characters: longer header cells name no column, and a heading is under twice this
_SPACE = re.compile(r"[ \t\n\r\f\v\u00a0]+")
_SNIFF = re.compile(rb"^(?:\xef\xbb\xbf)?\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html[\s>])", re.I | re.S)
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def is_html(name: str, media_type: str, data: bytes) -> bool:
    """Whether a file is an HTML page: declared so, named so (unless declared plain text, which is
    how to attach a page's source as it is), or, with no telling name or type, starting as one."""
    lower, media_type = name.lower(), media_type.lower().split(";")[0].strip()
    if media_type in MEDIA_TYPES:
        return True
    if media_type.startswith("text/") and media_type != "text/x-unknown":
        return False
    return lower.endswith(EXTENSIONS) or bool(_SNIFF.match(data[:1024]))


def decode(data: bytes) -> str | None:
    """The page's characters: a byte-order mark, else UTF-8, else the charset its <meta> declares
    (a page saved in windows-1252 or Shift_JIS), else windows-1252, as a browser reads a page
    that declares none (the HTML standard's default for most locales: maxima-doc's
    intromax.html is Latin-1 and says nothing). None when it declares a charset unknown here."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    m = _CHARSET.search(data[:4096])
    if m is None:
        return data.decode("cp1252", errors="replace")
    try:
        return data.decode(codecs.lookup(m.group(1).decode("ascii")).name, errors="replace")
    except LookupError:
        return None


def read(source: str, check: Callable[[int], None]) -> tuple[str, list[tuple[int, int, str]]]:
    """(text, headings) of an HTML page: `headings` are (offset in text, level 1-6, title).
    `check(chars)` is called between pieces of `source` with the characters of text read so far,
    and raises to stop (the deadline, the text limit)."""
    page = _PageText()
    for at in range(0, len(source), FEED_CHARS):
        page.feed(source[at:at + FEED_CHARS])
        check(page.chars)
    page.close()
    return page.result()


class _PageText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []          # finished lines
        self.run: list[str] = []            # the line being read
        # the element whose text is not read (""; none) and how many elements of its name are open:
        # a count, not a stack of every tag inside it, which made 40,000 unclosed <g> in an <svg>
        # cost 16 s (each end tag searched the stack)
        self.skip = ""
        self.skip_depth = 0
        self.pre = 0                        # inside <pre>: white space as written
        self.heading = 0                    # inside <hN>: N
        self.level = 0                      # the last <hN>'s N: a bold line is a heading one deeper
        self.headings: list[tuple[int, int, str]] = []   # (line index, level, title)
        self.lists: list[list[int]] = []    # open lists: [] for <ul>, [next number] for <ol>
        self.tables: list[list[str]] = []   # open tables: the names their header row gave ([]: none)
        self.row: list[tuple[str, bool]] | None = None   # the open row's cells read so far: (text, is <th>)
        self.cell: tuple[int, bool] | None = None        # the open cell: (where it starts in `run`, is <th>)
        self.bold = 0                       # inside <b> or <strong>
        self.plain = self.strong = 0        # characters of the line outside and inside bold
        self.title: list[str] = []
        self.in_title = False
        self.chars = 0

    # -- the parser's events
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if not self.skip and tag == "br":
                self.run.append("\n")
            elif not self.skip and tag == "hr":
                self._end_line()
            return
        if self.skip:
            self.skip_depth += tag == self.skip
            return
        if tag == "head":   # not skipped: its <title> is read, and a page often leaves </head> out
            return
        if tag in _SKIP or _hidden(attrs):
            self.skip, self.skip_depth = tag, 1
        elif tag == "title":
            self.in_title = True
        elif tag in ("b", "strong"):
            self.bold += 1
        elif tag == "sup" and "".join(self.run[-1:])[-1:].isdigit():
            self.run.append("^")   # an exponent: 2<sup>31</sup>-1 is 2^31-1, not 231-1
        elif tag in _CELL:
            self._cell(tag == "th")
        elif tag in _BLOCK:
            self._end_line()
            if tag == "table":
                self.tables.append([])
            elif tag in ("ul", "menu", "dir"):
                self.lists.append([])
            elif tag == "ol":
                start = dict(attrs).get("start") or "1"
                self.lists.append([int(start) if start.strip().isdigit() else 1])
            elif tag == "li":
                numbers = self.lists[-1] if self.lists else []
                value = (dict(attrs).get("value") or "").strip()
                if numbers and value.isdigit():   # <li value="7">: the list goes on from 7
                    numbers[0] = int(value)
                if numbers:
                    self.run.append(f"{numbers[0]}) ")
                    numbers[0] += 1
                else:
                    self.run.append("- ")
            elif tag == "pre":
                self.pre += 1
            elif m := _HEADING.match(tag):
                self.heading = self.level = int(m.group(1))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID or not (self.skip or tag in _SKIP or _hidden(attrs)):
            self.handle_starttag(tag, attrs)   # <br/>, <p/>; an empty <svg/> opens nothing to skip

    def handle_endtag(self, tag: str) -> None:
        if self.skip:
            if tag == self.skip:   # its end closes whatever was left open inside it
                self.skip_depth -= 1
                self.skip = self.skip if self.skip_depth else ""
            return
        if tag == "title":
            self.in_title = False
        elif tag in ("b", "strong"):
            self.bold = max(0, self.bold - 1)
        elif tag in _BLOCK:
            self._end_line()
            if tag == "table" and self.tables:
                self.tables.pop()
            elif tag in ("ul", "ol", "menu", "dir") and self.lists:
                self.lists.pop()
            elif tag == "pre":
                self.pre = max(0, self.pre - 1)
            elif _HEADING.match(tag):
                self.heading = 0

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.in_title:
            self.title.append(data)
            return
        self.chars += len(data)
        seen = len(data) - data.count(" ") - data.count("\n") - data.count("\t")
        if self.bold:
            self.strong += seen
        else:
            self.plain += seen
        if self.pre:
            self.run.append(data.replace("\r\n", "\n"))
        else:
            self.run.append(_SPACE.sub(" ", data))

    # -- table rows
    def _cell(self, head: bool) -> None:
        """A cell begins: the one before it ends."""
        if self.row is None:
            self._end_line()
            self.row = []
        elif self.cell is not None:
            self.row.append(self._cell_text())
        self.cell = (len(self.run), head)

    def _cell_text(self) -> tuple[str, bool]:
        at, head = self.cell
        text = " ".join("".join(self.run[at:]).split())
        del self.run[at:]
        self.cell = None
        return text, head

    def _end_row(self) -> None:
        """The open row as one line: "name: value | name: value" under its table's header row
        (as a CSV's records are read, documents/excerpts.py `_record`), else its cells joined."""
        row, self.row = self.row, None
        if self.cell is not None:
            row.append(self._cell_text())
        cells = [text for text, _ in row]
        names = self.tables[-1] if self.tables else []
        if self.tables and not names and len(cells) > 1 and all(head for _, head in row) \
                and all(cells) and any(len(c) <= MAX_NAME for c in cells):
            # the header row: its names label the rows under it; a name as long as a sentence
            # ("Example Typenames From The CREATE TABLE Statement or CAST Expression") is left out
            self.tables[-1] = [c if len(c) <= MAX_NAME else "" for c in cells]
            line = " | ".join(cells)
        elif names and len(cells) == len(names) and not all(head for _, head in row):
            line = " | ".join(f"{n}: {v}" if n else v for n, v in zip(names, cells) if v)
        else:
            line = " | ".join(c for c in cells if c)
        self.run.append(line)

    # -- lines
    def _end_line(self) -> None:
        if self.row is not None:
            if self.cell is not None and "".join(self.run[self.cell[0]:]).strip():   # a block inside a cell
                self.row.append(self._cell_text())
            self._end_row()
            self.row = None
        raw = "".join(self.run)
        if _MARKER.fullmatch(raw):   # a list item whose text is in a block of its own: "1) <p>text</p>"
            return
        self.run = []
        plain, strong, self.plain, self.strong = self.plain, self.strong, 0, 0
        if self.pre:
            parts = [p.rstrip() for p in raw.strip("\n").split("\n") if p.strip()]
        else:   # no permalink mark: "Basic Usage¶" (Sphinx, MkDocs) shows its ¶ only under the mouse
            parts = [" ".join(p.split()).rstrip("¶ ") for p in raw.split("\n") if p.strip(" \t\n\r\f¶")]
        if not parts:
            return
        line = " ".join(" ".join(parts).split())
        if self.heading:
            self.headings.append((len(self.lines), self.heading, line))
            parts = [line]
        elif strong and not plain and not self.pre and len(parts) == 1 and len(line) <= MAX_NAME * 2 \
                and not _END.search(line) and not self.tables:
            # a paragraph all in bold, short, ending no sentence: a heading as a reader sees it
            self.headings.append((len(self.lines), min(9, self.level + 1), _MARKER_START.sub("", line)))
        self.lines += parts

    def result(self) -> tuple[str, list[tuple[int, int, str]]]:
        self._end_line()
        title = " ".join("".join(self.title).split())
        lines, headings = self.lines, self.headings
        if title and (not lines or lines[0] != title):
            lines = [title, *lines]
            headings = ([(0, 1, title)] if not any(level == 1 for _, level, _ in headings) else []) + \
                       [(i + 1, level, t) for i, level, t in headings]
        offsets, at = [], 0
        for line in lines:
            offsets.append(at)
            at += len(line) + 1
        return "\n".join(lines), [(offsets[i], level, t) for i, level, t in headings]


def _hidden(attrs: list[tuple[str, str | None]]) -> bool:
    """An element the page does not show: `hidden`, or aria-hidden="true" (icons, decorations);
    or one that is a menu as `<nav>` is, marked role="navigation" (Sphinx's "related" and
    sidebar `<div>`s: "index | modules | next | previous | Python »" above every page)."""
    return any(k == "hidden" or (k == "aria-hidden" and (v or "").strip().lower() == "true")
               or (k == "role" and (v or "").strip().lower() == "navigation") for k, v in attrs)
