"""What the model reads of documents too long for its context, for one question.

`read` picks in two steps, within a token budget:

1. **Chunks.** The pages the question names ("what does page 212 say?"), then BM25's best
   CANDIDATES chunks across all the documents (one index, one IDF: their scores compare).
2. **Sentences.** BM25 weighs a chunk as a bag of words, so a chunk that says "night" in one
   sentence and "manager" in another can outrank the one sentence that says "the night manager
   of the school in Fenwick Cross is ..." (it ranked 28th of 64 in the documents benchmark).
   Each candidate's sentences (and lines: a table row, a CSV record) are scored by the
   question's words they hold *together*, each word weighed by how rare it is among those
   sentences, the chunk's headings counting half, and so do the words of a heading inside the
   chunk for the sentences under it. The model reads passages: a matched sentence with WINDOW
   sentences either side (a heading: the sentences after it), best first, down to MIN_SHARE of
   the best score; room still left widens the passages read, best first, towards their whole
   chunks. A code the question asks about ("the argument type m", "the series bx") counts as a
   word, and a rare one where it starts a sentence, as in a list of types or options (`_codes`).

Passages rather than whole chunks because of prompt time: on 2 CPU cores the 0.5B demo model
reads 100-200 prompt tokens a second, and EXCERPT_TOKENS (documents/reading.py) is 320 tokens;
that is one or two whole chunks, or several passages, which find the fact far more often when
the question shares only a few words with it (docs/BENCHMARKS.md, documents).

What is picked is written best first (`_best_first`): the best passage's chunk, then the chunks
after and before it, each under the place a reader would cite and closed by an end mark, so the
first mark the model meets is the best match's. A CSV's first line (its column names) goes in
the heading, since its records mean nothing without it, and its records are read alone: the
record before or after the one asked about is another facility's, a number to mix up.

    ## File: contract.pdf (300 pages, too long to read whole: here are the 3 parts that best
    match the question, each under its page in brackets)

    [p. 217]
    ...
    …
    ...
    [end of p. 217]

    [p. 12]
    ...
    [end of p. 12]

When nothing in a document matches (a question such as "summarise this" names none of its
words), the model reads its beginning, whole chunks, and the heading says so.
`Reading.report()` is what a reply says it read, for the chat page to show under the answer.
"""
from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llmpack.runtime.documents import layout
from llmpack.runtime.documents.chunks import line_range
from llmpack.runtime.documents.extract import format_message
from llmpack.runtime.documents.index import STOPWORDS, DocumentIndex, Hit, Indexed, page_refs
from llmpack.runtime.documents.words import (DATE_WORDS, WORD, YEAR_WORDS, Matcher, answers, elided, sentences,
                                             terms)

CANDIDATES = 256       # chunks BM25 hands over per question, their sentences scored (a few ms)
WINDOW = 1             # sentences read on each side of a matched one
MIN_SHARE = 0.5        # a sentence scoring under this share of the best one is not read for itself
HEADING_WEIGHT = 0.5   # a question's word found in a chunk's headings, not in the sentence
K1, B = 1.2, 0.75      # BM25's usual constants, applied to sentences (_best_sentences)
MAX_POINTERS = 4      # index entries followed to the lines they name, per question (_ranked)
MAX_CODE = 3           # characters: a lower-case word this short asked about may be a code (`_codes`)
MAX_LIST = 24          # sentences of a list read with the line that introduces it (`_list_after`)
MIN_ROOM = 32          # tokens: less room than this left in the budget and the search stops
MARGIN = 0.98          # token counts of parts are added; the joined text may tokenize a little longer
GAP = "\n…\n"          # between two passages of one chunk that are not next to each other
_TABLE_EXT = (".csv", ".tsv")
_ITEM = re.compile(r"[-*•]\s|\d{1,3}[.)]\s")   # a list item's start
_MARKS = re.compile(r"^\s*(?:#{1,6}\s+|[-*•]\s+|\d{1,3}\)\s+)")   # before a heading's words: Markdown's, a list's


@dataclass(slots=True)
class Reading:
    """What the model reads of one long document for one question."""
    doc: Indexed
    hits: list[Hit]       # passages (or whole chunks), the best match's chunk first (_best_first)
    matched: bool         # False: no chunk matched the question, so `hits` is the beginning
    columns: str = ""     # a CSV's first line, given with its records

    def title(self) -> str:
        size = f"{self.doc.pages:,} pages" if self.doc.pages else f"{self.doc.chars:,} characters"
        n = len({(h.ord, h.label) for h in self.hits})
        what = "part" if n == 1 else f"{n} parts"
        unit = "page" if self.doc.pages else "place in the file"
        if not self.matched:
            why = f"no part of it matches the question, so here is its beginning ({what})"
        else:
            why = f"here {'is the part' if n == 1 else 'are the ' + what} that best match{'es' if n == 1 else ''} the question"
        columns = f"; its first line names the columns: {self.columns}" if self.columns else ""
        # No "say its page": the server cites (attribution.py). Asked to, the 0.5B demo model
        # answered "Say which page says so." with only "[p. 7]"; without it, with the fact and
        # its page (docs/BENCHMARKS.md, documents).
        return f"{self.doc.name} ({size}, too long to read whole: {why}, each under its {unit} in brackets{columns})"

    def body(self) -> str:
        """The passages under their marks (`render`)."""
        return render(self.hits, self.columns)

    def section(self) -> tuple[str, str]:
        """(heading, text) as documents.extract.format_message takes them."""
        return self.title(), self.body()

    def report(self) -> dict:
        """What the reply says the model read of this file (JSON)."""
        return {"file_id": self.doc.id, "filename": self.doc.name, "pages": self.doc.pages,
                "chunks": self.doc.chunks, "matched": self.matched,
                "parts": [{"label": h.label, "page": h.page, "heading": h.heading[-80:]} for h in self.hits]}


def note(readings: Sequence[Reading]) -> str:
    """The line after the excerpts, before the question. Without it the 0.5B demo model answered
    "Where is the spare key ...? Say which page says so." with only "[p. 7]" when it read one
    short part, as if naming the place were the whole task; told that the app shows the place,
    it states the fact (docs/BENCHMARKS.md, documents)."""
    unit = "page" if all(r.doc.pages for r in readings) else "place"
    return f"(Answer from the parts above: state what they say in a sentence; the app shows the {unit}.)"


def block(hit: Hit, text: str | None = None) -> str:
    """One place as the model reads it: its mark, its text, and the mark again as an end mark.
    The end mark is there for small models: without it the 0.5B demo model cited the page
    whose mark came *after* the sentence it used (p. 254 for a fact on p. 217)."""
    where = f"[{hit.label}]" if not hit.heading or hit.page else f"[{hit.label}] ({hit.heading})"
    return f"{where}\n{hit.text if text is None else text}\n[end of {hit.label}]"


def render(hits: Sequence[Hit], columns: str = "") -> str:
    """Passages under their marks: passages of one chunk, and neighbouring chunks, that have the
    same mark share one. A CSV's records (`columns`: its first line) are written field by field
    under the column names (`_record`)."""
    if columns:
        hits = [Hit(h.doc, h.ord, h.page, h.label, h.heading, _record(h.text, columns), h.score) for h in hits]
    groups: list[list[Hit]] = []
    for h in hits:
        last = groups[-1][-1] if groups else None
        if last is not None and last.label == h.label and h.ord in (last.ord, last.ord + 1):
            groups[-1].append(h)
        else:
            groups.append([h])
    return "\n\n".join(block(g[0], _joined(g)) for g in groups)


def _record(lines: str, columns: str) -> str:
    """CSV lines as "name: value; name: value", each under the first line's names. Read bare,
    "202,Fordby Lane,pumping station,Tomas Fenwick,NR-9087,8936" had the 0.5B demo model give
    8936 (the litres) as the serial, the column names being only in the heading."""
    delimiter = "\t" if "\t" in columns else ","
    names = next(csv.reader([columns], delimiter=delimiter))
    out = []
    for line in lines.split("\n"):
        values = next(csv.reader([line], delimiter=delimiter), [])
        out.append("; ".join(f"{n}: {v}" for n, v in zip(names, values)) if len(values) == len(names) else line)
    return "\n".join(out)


def _joined(hits: list[Hit]) -> str:
    out = hits[0].text
    for before, h in zip(hits, hits[1:]):
        out += (GAP if h.ord == before.ord else "\n") + h.text
    return out


def read(index: DocumentIndex, docs: Sequence[Indexed], question: str, budget: int,
         count: Callable[[str], int]) -> list[Reading]:
    """The passages of `docs` that best answer `question` and fit in `budget` tokens together
    with their headings (`count` measures a text in the model's tokens)."""
    if not docs:
        return []
    columns = {d.id: _columns(index, d) for d in docs}
    # each heading is counted at its longest wording (the "no part matches" one), and once
    room = int(budget * MARGIN) - sum(count(format_message([(_longest_title(d, columns[d.id]), "")], ""))
                                      for d in docs)
    named = [h for d in docs if d.pages for h in index.on_pages(d.id, page_refs(question, d.pages))]
    found = index.search([d.id for d in docs], question, CANDIDATES)
    picker = _Picker(room, count, question, {d.id: columns[d.id] for d in docs if columns[d.id]})
    if not named and not found:   # nothing matches: the beginning of each document, in turn
        heads = [index.first(d.id, 64 // len(docs) or 1) for d in docs]
        for h in [h for group in zip(*heads) for h in group] + [h for g in heads for h in g[len(min(heads, key=len)):]]:
            if picker.room < MIN_ROOM:
                break
            picker.whole(h)
        return [Reading(d, picker.hits(d.id), False, columns[d.id]) for d in docs if picker.hits(d.id)]
    for h in named:
        if picker.room < MIN_ROOM:
            break
        picker.whole(h)
    for chunk, at in _ranked(index, found, question):
        if picker.room < MIN_ROOM:
            break
        picker.passage(chunk, at)
    for h in found if not picker.chunks else ():   # only contents lines matched: the chunks they stand in
        if picker.room < MIN_ROOM:
            break
        picker.whole(h)
    picker.widen()
    return [Reading(d, picker.hits(d.id), True, columns[d.id]) for d in docs if picker.hits(d.id)]


@dataclass(slots=True)
class _Chunk:
    """A candidate chunk, its sentences, and which of them are read ([first, last] runs)."""
    hit: Hit
    spans: list[tuple[int, int]]
    runs: list[list[int]] = field(default_factory=list)
    cost: int = 0
    picked: list[int] = field(default_factory=list)   # the matched sentences read, best first

    def pieces(self) -> list[Hit]:
        """The runs read, as hits. Under one mark (a page, a section) they are in text order; a
        file cut by lines gives each run its own mark, so the best one comes first."""
        runs = self.runs
        if line_range(self.hit.label)[0]:
            def rank(run: list[int]) -> int:
                return min((k for k, i in enumerate(self.picked) if run[0] <= i <= run[1]), default=len(self.picked))
            runs = sorted(runs, key=rank)
        return [_piece(self.hit, self.spans[a][0], self.spans[b][1]) for a, b in runs]


def _ranked(index: DocumentIndex, found: list[Hit], question: str) -> list[tuple[_Chunk, int]]:
    """The (chunk, sentence) pairs worth reading, best first (`_best_sentences`), with the place
    each matching index entry names read at the entry's rank: a careful reader who finds "length
    of source lines ... (line 2264)" in a book's index turns to line 2264, where the rule stands
    in other words than the question's ("keep the length of source lines to 79 characters")."""
    sentences_, pointers = _best_sentences(found, question)
    chunks = {(c.hit.doc, c.hit.ord): c for _, c, _ in sentences_}
    out: list[tuple[float, int, _Chunk, int]] = [(s, k, c, i) for k, (s, c, i) in enumerate(sentences_)]
    for score, doc, line in pointers[:MAX_POINTERS]:
        hit = index.at_line(doc, line)
        if hit is None:
            continue
        chunk = chunks.setdefault((hit.doc, hit.ord), _Chunk(hit, sentences(hit.text) or [(0, len(hit.text))]))
        first = line_range(hit.label)[0]
        offset = 0
        for _ in range(line - first):
            offset = hit.text.find("\n", offset) + 1
        at = next((i for i, (_, b) in enumerate(chunk.spans) if b > offset), len(chunk.spans) - 1)
        out.append((score, -1, chunk, at))   # before a sentence of the same score: the reader's own choice
    return [(c, i) for _, _, c, i in sorted(out, key=lambda x: (-x[0], x[1]))]


def _best_sentences(found: list[Hit], question: str) -> tuple[list[tuple[float, _Chunk, int]], list[tuple[float, str, int]]]:
    """(chunk, sentence) pairs worth reading with their scores, best first, down to MIN_SHARE of
    the best score; and the index entries that match as well, as (score, document, line named).
    A sentence scores as BM25 would score it as a document of its own among the candidates'
    sentences: each of the question's words it holds weighs by its rarity (log(1 + N / df)),
    and a long sentence that holds them counts for less than a short one (K1, B); the chunk's
    headings' words count HEADING_WEIGHT. A contents line is never read for itself."""
    codes = _codes(question)
    wanted = set(terms(question, letters=True)) | {_label(c) for c in codes}
    match = Matcher(wanted)   # "drückt" in the question finds "drücken" in the text (words.meet)
    kinds = wanted & (DATE_WORDS | YEAR_WORDS)   # "date" is answered by a date (words.answers)
    chunks = [_Chunk(h, sentences(h.text) or [(0, len(h.text))]) for h in found]
    matched: list[tuple[int, int, int, frozenset[str], frozenset[str]]] = []
    entries: list[tuple[int, int, frozenset[str], str, int]] = []
    df: dict[str, int] = defaultdict(int)
    total = 0
    for c, chunk in enumerate(chunks):
        heading = section = match(terms(chunk.hit.heading))
        contents = layout.contents_lines(chunk.hit.text)
        for i, (a, b) in enumerate(chunk.spans):
            if layout.is_underline(chunk.hit.text[a:b]):
                continue
            if any(x <= a and b <= y for x, y in contents):
                # a contents line names the section the question is about; it does not answer,
                # but an index entry that names a line says where the answer is
                line = layout.points_to(chunk.hit.text, b) if line_range(chunk.hit.label)[0] else None
                entry = terms(layout.entry_words(chunk.hit.text[a:b])) if line else []
                own = match(entry)
                if own:
                    entries.append((len(entry), c, own, chunk.hit.doc, line))
                continue
            title = _heading(chunk, i)
            if title:   # names what follows: its words count for its section's sentences too
                section = heading | match(terms(chunk.hit.text[a:b]))
            words = terms(chunk.hit.text[a:b], letters=True)
            first = WORD.search(chunk.hit.text, a, b) if codes else None
            if first and first.group() in codes and not chunk.hit.text[a:first.start()].strip(" \t•-*"):
                words.append(_label(first.group()))   # "m A standard mandatory argument": m's own entry
            total += len(words)
            own = match(words) | (kinds & answers(chunk.hit.text[a:b]) if kinds else frozenset())
            for t in own:
                df[t] += 1
            head = heading if title else section
            if own or head:
                matched.append((c, i, len(words), frozenset(own), frozenset(head - own)))
    n = sum(len(c.spans) for c in chunks)
    mean = total / n if n else 1.0
    weight = {t: math.log(1 + n / d) for t, d in df.items()}

    def score(length: int, own: frozenset[str], head: frozenset[str]) -> float:
        saturation = (K1 + 1) / (1 + K1 * (1 - B + B * length / mean))
        return sum(weight.get(t, math.log(1 + n)) for t in own) * saturation + \
            HEADING_WEIGHT * sum(weight.get(t, math.log(1 + n)) for t in head)
    scored = sorted(((score(length, own, head), c, i) for c, i, length, own, head in matched),
                    key=lambda x: (-x[0], x[1], x[2]))
    pointed = sorted({(doc, line): (score(length, own, frozenset()), doc, line)
                      for length, _, own, doc, line in entries}.values(), key=lambda x: -x[0])
    best = max(scored[0][0] if scored else 0.0, pointed[0][0] if pointed else 0.0)
    keep = MIN_SHARE * best
    return ([(s, chunks[c], i) for s, c, i in scored if s >= keep and s > 0],
            [(s, doc, line) for s, doc, line in pointed if s >= keep and s > 0])


def _codes(question: str) -> frozenset[str]:
    """The short codes a question asks about, as written: a letter standing alone ("the argument
    type m"), or a word of at most MAX_CODE lower-case letters and digits that is not a stop word
    ("the series value bx", "phv"). A list of types, options or values starts each entry with
    its code ("m A standard mandatory argument", "bx Bold extended"); asked "what does the
    argument type m denote?", m's entry holds only "argument" of the question's other words,
    and m stands in every code example, but as the first word of a sentence it is rare (`_label`).
    Capitalised words are left out: a sentence starting with "GNU" or "Use" is no entry."""
    out = set()
    for m in WORD.finditer(question):
        w = m.group()
        if elided(question, m.start()) or w.lower() in STOPWORDS:
            continue
        if (len(w) == 1 and w.isascii() and w.isalpha()) or \
                (len(w) <= MAX_CODE and w.isascii() and w.isalnum() and w == w.lower() and not w.isdigit()):
            out.add(w)
    return frozenset(out)


def _label(code: str) -> str:
    """The term of a sentence whose first word is `code` (`_codes`)."""
    return code + ":"


def _heading(chunk: _Chunk, i: int) -> bool:
    """Whether sentence `i` of `chunk` is a heading: a numbered title, a line underlined, or the
    title of the section the chunk begins (a Markdown, DOCX or HTML heading, which the file marks
    as one: "Maximum length of a string or BLOB", bold in an SQLite page).
    A heading says what its section is about, not what the section says: read with the sentence
    before it (the end of another section) and its underline, it answered nothing. So its words
    also count for its section's sentences (HEADING_WEIGHT), and it is read with the sentences
    after it (`_Picker.passage`)."""
    a, b = chunk.spans[i]
    below = chunk.spans[i + 1] if i + 1 < len(chunk.spans) else (b, b)
    line = chunk.hit.text[a:b]
    if chunk.hit.heading and _MARKS.sub("", line).strip() == chunk.hit.heading.rsplit(" > ", 1)[-1]:
        return True
    return layout.is_heading(line, chunk.hit.text[below[0]:below[1]])


def _introduces(chunk: _Chunk, i: int) -> bool:
    """Whether sentence `i` of `chunk` ends with a colon: "... has one of the following storage
    classes:" says what comes after it, as a heading does, so it is read with what follows."""
    a, b = chunk.spans[i]
    return chunk.hit.text[a:b].rstrip().endswith(":")


def _list_after(chunk: _Chunk, i: int) -> int:
    """The last sentence of the list right after sentence `i` ("- NULL. The value is a NULL
    value.", "- INTEGER. ..."): its items' sentences, up to MAX_LIST of them; `i` when no list
    follows. A question about what a colon introduces is answered by the whole list, and the
    first item alone answered "Which storage classes does SQLite have?" with one of five."""
    text, last = chunk.hit.text, i
    for j in range(i + 1, min(len(chunk.spans), i + 1 + MAX_LIST)):
        a, _ = chunk.spans[j]
        starts_line = "\n" in text[chunk.spans[j - 1][1]:a]
        if starts_line and not _ITEM.match(text, a):
            break
        last = j
    return last if last > i and _ITEM.match(text, chunk.spans[i + 1][0]) else i


def _underlined(chunk: _Chunk, i: int) -> int:
    """1 if sentence `i` of `chunk` has an underline ("=====") as the next sentence, else 0."""
    if i + 1 >= len(chunk.spans):
        return 0
    a, b = chunk.spans[i + 1]
    return int(layout.is_underline(chunk.hit.text[a:b]))


class _Picker:
    """The chunks read so far, what of them, and the tokens left."""

    def __init__(self, room: int, count: Callable[[str], int], question: str, tables: dict[str, str]) -> None:
        self.room, self.count, self.question = room, count, question
        self.tables = tables   # CSV documents' column names: their lines are records, read alone, not widened
        self.chunks: dict[tuple[str, int], _Chunk] = {}   # in the order first picked
        self.order: list[_Chunk] = []                      # passages' chunks, best first, for widen()

    def whole(self, hit: Hit) -> None:
        """A whole chunk (a named page, a document's beginning); the first one cut to fit."""
        if (hit.doc, hit.ord) in self.chunks:
            return
        chunk = _Chunk(hit, [(0, len(hit.text))], [[0, 0]])
        if not self._fits(chunk) and not self.chunks:
            cut = _trimmed(hit, self.question, self.room, self.count)
            if cut is not None:
                chunk = _Chunk(cut, [(0, len(cut.text))], [[0, 0]])
                self._fits(chunk)

    def passage(self, chunk: _Chunk, at: int) -> None:
        """Sentence `at` of `chunk` with WINDOW sentences either side, else alone, else (nothing
        read yet) cut to fit."""
        key = (chunk.hit.doc, chunk.hit.ord)
        if key in self.chunks and self.chunks[key] is not chunk:   # read whole already
            return
        if any(a <= at <= b for a, b in chunk.runs):
            return
        if chunk.hit.doc in self.tables and chunk.hit.ord == 0 and at == 0:   # the column names: in the heading
            return
        window = 0 if chunk.hit.doc in self.tables else WINDOW
        lo, hi = max(0, at - window), min(len(chunk.spans) - 1, at + window)
        if _heading(chunk, at) or _introduces(chunk, at):   # read with what follows, not with what came before
            lo, hi = at, min(len(chunk.spans) - 1, at + 2 * window + _underlined(chunk, at))
        listed = max((_list_after(chunk, k) for k in range(lo, hi + 1) if _introduces(chunk, k)), default=hi)
        for lo, hi in ((lo, max(hi, listed)), (lo, hi), (at, at)):
            if self._try(chunk, lo, hi):
                chunk.picked.append(at)
                return
        if not self.chunks:
            a, b = chunk.spans[at]
            cut = _trimmed(_piece(chunk.hit, a, b), self.question, self.room, self.count)
            if cut is not None:
                self._fits(_Chunk(cut, [(0, len(cut.text))], [[0, 0]]))

    def widen(self) -> None:
        """Room left: each passage read grows by a sentence after it, then one before it, best
        first, round after round, until nothing more fits."""
        grew = True
        while grew and self.room >= MIN_ROOM:
            grew = False
            for chunk in (c for c in self.order if c.hit.doc not in self.tables):
                for step in (1, -1):
                    for lo, hi in list(chunk.runs):
                        lo2, hi2 = (lo, hi + 1) if step == 1 else (lo - 1, hi)
                        if lo2 >= 0 and hi2 < len(chunk.spans) and self._try(chunk, lo2, hi2):
                            grew = True

    def hits(self, doc: str) -> list[Hit]:
        return [p for h in _best_first([c.hit for c in self.chunks.values() if c.hit.doc == doc])
                for p in self.chunks[(h.doc, h.ord)].pieces()]

    def _try(self, chunk: _Chunk, lo: int, hi: int) -> bool:
        """Read sentences lo..hi of `chunk` too, if the room allows."""
        before = [list(r) for r in chunk.runs]
        chunk.runs = _merged(before + [[lo, hi]])
        if self._fits(chunk):
            return True
        chunk.runs = before
        return False

    def _fits(self, chunk: _Chunk) -> bool:
        """Take `chunk`'s (new) runs if they fit in the room; its cost is recounted whole."""
        text = render(chunk.pieces(), self.tables.get(chunk.hit.doc, "")) + "\n\n"
        cost = self.count(text)
        if cost - chunk.cost > self.room:
            return False
        self.room -= cost - chunk.cost
        chunk.cost = cost
        key = (chunk.hit.doc, chunk.hit.ord)
        if key not in self.chunks:
            self.chunks[key] = chunk
            self.order.append(chunk)
        return True


def _merged(runs: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in sorted(runs):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _piece(hit: Hit, start: int, end: int) -> Hit:
    """`hit.text[start:end]` as a hit of its own; a chunk cut by lines is labelled with the
    piece's own lines, so a source can still say which line."""
    text = hit.text[start:end]
    label = hit.label
    first = line_range(label)[0]
    if first:
        first += hit.text.count("\n", 0, start)
        last = first + text.count("\n")
        label = f"line {first}" if first == last else f"lines {first}-{last}"
    return Hit(hit.doc, hit.ord, hit.page, label, hit.heading, text, hit.score)


def _best_first(hits: list[Hit]) -> list[Hit]:
    """`hits` (chunks, in the order they were picked: best match first) as runs of neighbouring
    chunks, the run holding the best match first; within a run its best match first, then the
    chunks after it, then those before it (each in document order).
    Best first because a small model leans on what it reads first and copies the first mark it
    meets: in document order the 0.5B demo model answered from p. 217 but cited p. 150, and
    with a neighbour's end of p. 96 read before the best match it answered "[p. 96]" for a
    fact on p. 97."""
    rank = {(h.doc, h.ord): i for i, h in enumerate(hits)}
    runs: list[list[Hit]] = []
    for h in sorted(hits, key=lambda h: (h.doc, h.ord)):
        if runs and runs[-1][-1].doc == h.doc and runs[-1][-1].ord + 1 == h.ord:
            runs[-1].append(h)
        else:
            runs.append([h])
    out: list[Hit] = []
    for run in sorted(runs, key=lambda r: min(rank[(h.doc, h.ord)] for h in r)):
        top = min(range(len(run)), key=lambda j: rank[(run[j].doc, run[j].ord)])
        out += run[top:] + run[:top]
    return out


def _trimmed(hit: Hit, question: str, room: int, count: Callable[[str], int]) -> Hit | None:
    """`hit` cut to about `room` tokens from the sentence that holds most words of the question,
    or None when not even that fits."""
    text = hit.text
    match = Matcher(set(terms(question)))
    best, at = 0, 0
    for a, b in sentences(text):
        score = len(match(terms(text[a:b])))
        if score > best:
            best, at = score, a
    size = len(text)
    while size > 40:
        size = int(size * 0.8)
        start = max(0, min(at, len(text) - size))
        piece = ("…" if start else "") + text[start:start + size].strip() + ("…" if start + size < len(text) else "")
        cut = Hit(hit.doc, hit.ord, hit.page, hit.label, hit.heading, piece, hit.score)
        if count(block(cut) + "\n\n") <= room:
            return cut
    return None


def _columns(index: DocumentIndex, doc: Indexed) -> str:
    """A CSV's (or TSV's) first line, which names its columns; "" for other files."""
    if doc.pages or not doc.name.lower().endswith(_TABLE_EXT):
        return ""
    first = index.first(doc.id, 1)
    return first[0].text.split("\n", 1)[0][:300] if first else ""


def _longest_title(doc: Indexed, columns: str) -> str:
    """The heading at its longest: 'no part matches' wording, a long mark, many parts."""
    stand_in = [Hit(doc.id, i, 0, "lines 99999-99999", "", "") for i in range(99)]
    return Reading(doc, stand_in, False, columns).title()
