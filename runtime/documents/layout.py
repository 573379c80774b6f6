"""Text laid out as people's files are: where a line break ends a sentence and where it only
wraps one, what of a typeset page is furniture, and which lines are a table of contents.

Why: the documents code used to end a sentence at every newline. Real files wrap: a typeset PDF
breaks every line at the margin (and hyphenates: "com-" + "mands"), a text file is wrapped at
72-80 columns, and a page carries its running header and page number. A wrapped sentence cut
into two fragments could no longer be matched whole (a reply that repeated a definition word for
word got no source), and the same header on every page made every page a tie.

- `soft_break(text, at)`: whether the newline at `at` only wraps a sentence (documents/words.py
  joins the lines around it into one sentence). A break stays hard at a blank line, after a
  short line (a heading, the last line of a paragraph; not a passage's first line, which a cut
  at a sentence's start made short, before a lower-case line), before a list item or numbered heading,
  at a change of indentation (code), and in tables and CSV, whose lines are records.
  `reflow(text)` makes those newlines spaces for a reader (a source's context, shown by the page).
- `clean_pages(pages)`: a PDF's pages without their furniture (a line repeated at the top or
  bottom of most pages, or of most left or right pages of a two-sided book; a page number alone
  on a line; on a page with nothing else, what repeats is its text) and with words hyphenated
  at a line end joined ("environ-" + "ment" -> "environment", the line break moved after the
  word, so the page keeps its lines).
- `is_contents(line)` and `contents_lines(text)`: a table-of-contents line ("2.7 General style
  . . . . 7", or a run of numbered titles with no text between them), or an entry of a book's
  index as makeinfo writes one in plain text ("* length of source lines:   Formatting.   (line
  2264)"). It names a section; it does not state what the section says, so it is never the
  source of a claim. `points_to(text, end)`: the line such an entry names, where a careful
  reader turns to (documents/excerpts.py reads it for a question the entry matches).
- `is_title(line)`, `is_underline(line)` and `is_heading(line, below)`: a numbered title, the
  "=====" a text file sets under a heading, and either kind of heading (documents/chunks.py starts a piece at a heading, excerpts.py reads a heading
  with its section's first sentences).
"""
from __future__ import annotations

import re
from collections import Counter

from llmpack.runtime.documents.scripts import CJK

MIN_WRAP = 40            # a line shorter than this ends where its writer ended it, not at a margin
WRAP_SHARE = 0.6         # a wrapped line reaches at least this share of the text's longest line
FURNITURE_SHARE = 0.5    # a top or bottom line on at least this share of the pages is a running header/footer
MIN_FURNITURE_PAGES = 3
MIN_NUMBERED_PAGES = 5   # pages a line that carries the page's own number stands on, to be a running header
MAX_FURNITURE = 100      # characters: a running header or footer is a short line
CONTENTS_RUN = 3         # numbered titles in a row that make a table of contents

_NUMBERED = r"(?:\d{1,3}(?:\.\d{1,3})*\.?|[A-Z]\.(?:\d{1,3}\.?)*)"
# a line that starts something of its own: a list item, a numbered heading, a Markdown heading or quote
_HARD_START = re.compile(r"^\s*(?:[-*•–◦▪]\s|#{1,6}\s|>\s|\d{1,3}[.)]\s|\(?[a-z0-9]{1,3}\)\s"
                         r"|\d{1,3}(?:\.\d{1,3})+\.?\s+\S|[=\-~_*]{3,}\s*$)")
_ITEM = re.compile(r"\s*(?:[-*•–◦▪+]|\d{1,3}[.)])\s+")
_END_PUNCT = re.compile(r"[.!?。！？」』]['\"”’)\]]*\s*$")
_TABLE = re.compile(r"\t|\S {3,}\S|\|")
_CSV = re.compile(r",\S")
_PAGES = r"\d{1,4}(?:\s*[,–-]\s*\d{1,4})*"   # "120", or an index entry's "161, 900" and "37-39"
_LEADERS = re.compile(rf"(?:\.\s?){{4,}}\s*{_PAGES}\s*$|…{{2,}}\s*{_PAGES}\s*$")
_TITLE_PAGE = re.compile(rf"^\s*{_NUMBERED}\s+[^\W\d_a-z][^,;]{{0,90}}?\s\d{{1,4}}\s*$")
_TITLE = re.compile(rf"^\s*{_NUMBERED}\s+[^\s.].{{0,100}}$")
# a numbered title however long, its number glued to it as PDFium reads some ("10.14Liste anderer ..."),
# or an appendix's or a chapter's ("Appendix A Test and Demo Functions")
_NUMBERED_TITLE = re.compile(rf"^\s*(?:{_NUMBERED}|(?:Appendix|Chapter|Part|Anhang|Kapitel|Teil|Annexe|Chapitre)\s+"
                             rf"[A-Z\d]{{1,4}}\.?)(?:\s+[^\s.]|[^\s.\d])")
_UNDERLINE = re.compile(r"^\s*(?:={3,}|-{3,}|~{3,}|\*{3,})\s*$")
# makeinfo's plain-text index and menus: "* entry:   Node.   (line 2264)", the "(line N)" alone on
# the next line when the entry is long, and menu lines "* Node name::  what it holds"
_INDEX_ENTRY = re.compile(r"^\* [^\s:][^:]{0,80}:(?::.{0,100}|\s{2,}\S.{0,60}?\(line\s+\d+\))\s*$|^\s+\(line\s+\d+\)\s*$")
_LONG_ENTRY = re.compile(r"^\* [^\s:][^:]{0,80}:\s{2,}\S.{0,60}$")   # its "(line N)" alone on the next line
_LINE_POINTER = re.compile(r"\(line\s+(\d{1,7})\)\s*$")
_PAGE_NUMBER = re.compile(r"^\s*(?:[-–—]\s*)?(?:\d{1,4}|[ivxlcdm]{1,7})(?:\s*[-–—])?\s*$", re.I)
_PAGE_OF = re.compile(r"^\s*(?:page|p\.|seite|página|pagina)\s*\d{1,4}(?:\s*(?:of|/|von|de|sur)\s*\d{1,4})?\s*$", re.I)
_NUMBER = re.compile(r"\d{1,5}")
_HYPHEN = re.compile(r"(?<![\w-])([^\W\d_]*[a-zäöüßàâçéèêëîïôûùœæ]{2})-\n([a-zäöüßàâçéèêëîïôûùœæ]+)([,.;:]?)[ \t]*")


def width(text: str) -> int:
    """The text's margin, as the longest of its lines in columns (at least MIN_WRAP)."""
    return max(MIN_WRAP, max((_columns(line.rstrip()) for line in text.split("\n")), default=0))


def _columns(line: str) -> int:
    """A line's width as a terminal shows it: a Chinese or Japanese character takes two columns."""
    return len(line) + sum(len(m) for m in CJK.findall(line))


def soft_break(text: str, at: int, margin: int | None = None) -> bool:
    """Whether the newline at text[at] wraps a sentence rather than ending something."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at + 1)
    line, after = text[start:at], text[at + 1:end if end >= 0 else len(text)]
    if not line.strip() or not after.strip():
        return False                                   # a blank line: a paragraph ends
    margin = margin or width(text)
    if _columns(line.rstrip()) < max(MIN_WRAP, WRAP_SHARE * margin) and not (start == 0 and after.lstrip()[0].islower()):
        # short: a heading, the end of a paragraph. Not so the first line of a passage cut at a
        # sentence's start inside a line (what a question read of a page, which attribution
        # reads again): "In particular, the" + "act of running the Work ..." is one sentence
        return False
    if _END_PUNCT.search(line) or _HARD_START.match(after) or is_contents(line) or is_contents(after):
        return False
    if _TABLE.search(line.strip()) or _TABLE.search(after.strip()) or len(_CSV.findall(line)) >= 2:
        return False                                   # records and columns, each a line of its own
    indent, under = len(line) - len(line.lstrip()), len(after) - len(after.lstrip())
    item = _ITEM.match(line)
    if abs(indent - under) > 3 and not (item and under == item.end()):
        return False                                   # code, or a block set in (a list item's own lines may be)
    first = after.lstrip()[0]
    tail = line.rstrip()[-1]
    # lower case, a digit or an opening bracket carries on; after a comma, a hyphen or a lower-case
    # word an upper-case word carries on too ("... found in either LATEX: A Document ... or The\nLATEX
    # Companion"); a capital after anything else may start a new line of its own
    return first.islower() or first.isdigit() or first in "([\"'‘“" or tail in ",;-–(" or tail.islower() \
        or not first.isascii()


def reflow(text: str) -> str:
    """`text` with each newline that only wraps a sentence (`soft_break`) made a space: the same
    length, so offsets into it hold. What a reader is shown of a place (its source's context),
    so a typeset page's sentence reads as one line, not cut where the PDF's margin cut it."""
    margin = width(text)
    chars = list(text)
    for at, ch in enumerate(text):
        if ch == "\n" and soft_break(text, at, margin):
            chars[at] = " "
    return "".join(chars)


def is_contents(line: str) -> bool:
    """A table-of-contents line with its page: "2.7 General style . . . . . 7"."""
    return bool(_LEADERS.search(line) or _TITLE_PAGE.match(line) or _INDEX_ENTRY.match(line))


def is_index_line(line: str) -> bool:
    """A line of a book's index or of makeinfo's menus and index: a contents line whose title is
    not numbered ("isfield . . . . . 120", "* length of source lines:  Formatting.  (line 2264)").
    A table of contents numbers its titles ("2.6 Executable Octave Programs . . . 37"), so it
    outlines the book; an index is a list of words, in the order of the alphabet."""
    return bool(_INDEX_ENTRY.match(line) or (_LEADERS.search(line) and not _NUMBERED_TITLE.match(line)))


def without_index(text: str) -> str:
    """`text` without its index lines (is_index_line): what is read of it to say what a whole file
    is about. Two of the 16 parts of the Octave manual's summary were its function index."""
    lines = text.split("\n")
    kept = [ln for i, ln in enumerate(lines)
            if not (is_index_line(ln) or _long_entry(ln, lines[i + 1] if i + 1 < len(lines) else ""))
            or _wrapped_title(lines[i - 1] if i else "")]
    return "\n".join(kept) if len(kept) < len(lines) else text


def _wrapped_title(line: str) -> bool:
    """A numbered title that runs on to the next line, whose leaders and page end it there."""
    return bool(_NUMBERED_TITLE.match(line)) and not _LEADERS.search(line)


def entry_words(line: str) -> str:
    """What an index entry is about: "length of source lines" of "* length of source lines:
    Formatting.  (line 2264)", without the section it points to, whose name is not the entry's."""
    return line.strip()[2:].split(":", 1)[0] if line.lstrip().startswith("* ") else line


def points_to(text: str, end: int) -> int | None:
    """The line (from 1) that the index entry ending at `end` names: its "(line N)", on its own
    line or alone on the next one (makeinfo's long entries); None when it names none."""
    start = text.rfind("\n", 0, end) + 1
    stop = text.find("\n", end)
    line, rest = (text[start:], "") if stop < 0 else (text[start:stop], text[stop + 1:])
    m = _LINE_POINTER.search(line) or _long_entry(line, rest.split("\n", 1)[0])
    return int(m.group(1)) if m else None


def _long_entry(line: str, next_line: str) -> re.Match | None:
    """The "(line N)" alone on `next_line` when `line` is an index entry too long to hold it."""
    return _LINE_POINTER.fullmatch(next_line.strip()) if _LONG_ENTRY.match(line) else None


def contents_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of the table-of-contents lines of `text`: lines with dot leaders, and runs of
    at least CONTENTS_RUN numbered titles with nothing else between them (a text file's contents,
    "3.5 Conditional Compilation" with no page). A numbered title followed by text is a heading,
    not a contents line."""
    out: list[tuple[int, int]] = []
    run: list[tuple[int, int]] = []
    pos, blank = 0, False
    lines = text.split("\n") + [""]
    for i, line in enumerate(lines):
        next_line = lines[i + 1] if i + 1 < len(lines) else ""
        span = (pos, pos + len(line))
        pos += len(line) + 1
        if is_contents(line) or _long_entry(line, next_line):
            out.append(span)
            continue
        if is_title(line):
            run.append(span)
            blank = False
            continue
        if not line.strip() and run:
            blank = True
            continue                                    # a blank line inside a contents list
        if run and line.strip() and not blank:
            run.pop()                                   # the last title has its text (or underline) under it
        if len(run) >= CONTENTS_RUN:
            out += run
        run, blank = [], False
    if len(run) >= CONTENTS_RUN:   # titles to the end of the text: a contents page cut where a chunk ends
        out += run
    return sorted(out)


def is_title(line: str) -> bool:
    """A numbered title on a line of its own, "3.5 Conditional Compilation": a heading where text
    follows it, a contents line where more titles do."""
    return bool(_TITLE.match(line)) and not _END_PUNCT.search(line) and len(line.strip()) <= 100


def is_underline(line: str) -> bool:
    """The row of "=" or "-" a plain-text file sets under a heading."""
    return bool(_UNDERLINE.match(line))


def is_heading(line: str, below: str = "") -> bool:
    """Whether `line` (one line; `below`: the line under it) is a heading: a numbered title, or a
    short line that ends no sentence with an underline below it."""
    if "\n" in line:
        return False
    return is_title(line) or (is_underline(below) and 0 < len(line.strip()) <= 100 and not is_underline(line)
                              and not _END_PUNCT.search(line))


def clean_pages(pages: list[str]) -> list[str]:
    """A PDF's pages without running headers, footers and page numbers, hyphenation joined."""
    if not pages:
        return pages
    furniture = _furniture(pages)
    out = []
    for page in pages:
        lines = page.split("\n")
        keep = [line for i, line in enumerate(lines)
                if not (_edge(i, len(lines)) and (_is_page_number(line) or len(lines) > 2 and _key(line) in furniture))]
        if not any(line.strip() for line in keep):   # nothing else on it: what repeats is the page's text
            keep = [line for i, line in enumerate(lines) if not (_edge(i, len(lines)) and _is_page_number(line))]
        out.append(dehyphenate("\n".join(keep).strip()))
    return out


def dehyphenate(text: str) -> str:
    """Words hyphenated at a line end joined, the line break moved after the joined word."""
    return _HYPHEN.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}\n", text)


def _edge(i: int, n: int) -> bool:
    return i < 2 or i >= n - 2


def _is_page_number(line: str) -> bool:
    return bool(_PAGE_NUMBER.match(line) or _PAGE_OF.match(line))


def _key(line: str) -> str:
    """A header or footer compared without its numbers ("Chapter 3 · 41" and "Chapter 3 · 42")."""
    return re.sub(r"\d+", "#", " ".join(line.split())).lower()


def _furniture(pages: list[str]) -> set[str]:
    """The lines that stand at the top or bottom of most pages, or of most left-hand or most
    right-hand pages: a book printed two-sided puts its title over the left pages and the chapter's
    over the right ones ("596 GNU Octave (version 7.3.0)" heads 548 of the Octave manual's 1,158
    pages, 95 % of its even ones, and was read as text on each)."""
    if len(pages) < MIN_FURNITURE_PAGES:
        return set()
    edges = _edge_lines(pages)
    seen: Counter[str] = Counter()
    sides: tuple[Counter[str], Counter[str]] = (Counter(), Counter())
    for n, lines in edges:
        keys = {_key(line) for line in lines}
        seen.update(keys)
        sides[n % 2].update(keys)
    need = max(MIN_FURNITURE_PAGES, FURNITURE_SHARE * len(pages))
    need_side = [max(MIN_FURNITURE_PAGES, FURNITURE_SHARE * len(pages[side::2])) for side in (0, 1)]
    return {k for k, n in seen.items() if k.strip("# ") and (
        n >= need or any(sides[side][k] >= need_side[side] for side in (0, 1)))} | _page_numbered(edges)


def _edge_lines(pages: list[str]) -> list[tuple[int, list[str]]]:
    """(page index, its top and bottom lines short enough for a header or footer) of every page of
    more than two lines: a page of one or two lines is all text, whatever repeats."""
    out = []
    for n, page in enumerate(pages):
        lines = [line for line in page.split("\n") if line.strip()]
        if len(lines) > 2:
            out.append((n, [line for i, line in enumerate(lines) if _edge(i, len(lines)) and len(line) <= MAX_FURNITURE]))
    return out


def _page_numbered(edges: list[tuple[int, list[str]]]) -> set[str]:
    """The top or bottom lines that carry their page's own number: a chapter's running header
    ("Chapter 15: Plotting 317" heads the right pages of that chapter alone, 97 of the Octave
    manual's 1,158 pages, under any share of the book). Such a line's number is the PDF's page
    index plus one offset, on at least MIN_NUMBERED_PAGES pages and on at least FURNITURE_SHARE
    of one side's pages between its first and its last. A chapter's own title ("Kapitel 1" opening
    the Debian Reference's first chapter, "Kapitel 2" its second) numbers chapters, not pages, and
    a sentence that ends a page with "... see [plot], page 316." now and then is not on most of
    the pages it spans: both stay. Three pages were too few: "The result of which can be seen in
    Figure 28.1." ended three pages of the Octave manual whose figures were numbered as the pages."""
    tracks: dict[tuple[str, int, int], list[int]] = {}
    for n, lines in edges:
        for line in lines:
            key = _key(line)
            for j, m in enumerate(_NUMBER.findall(line)[:4]):
                at = tracks.setdefault((key, j, int(m) - n), [])
                if not at or at[-1] != n:
                    at.append(n)
    return {key for (key, _, _), at in tracks.items() if key.strip("# ") and len(at) >= MIN_NUMBERED_PAGES
            and len(at) >= FURNITURE_SHARE * ((at[-1] - at[0]) // 2 + 1)}
