"""What the model reads of documents too long for its context, for one question.

`read` picks, within a token budget, the chunks of the indexed documents that best answer the
question: first the pages the question names ("what does page 212 say?"), then BM25's best
matches across all the documents (their scores are comparable: one index, one IDF), each taken
whole if it still fits; room still left goes to the chunks just before and after those (an
answer often runs across a cut). What is picked is written back best match first, then what
follows it and then what comes before it (`_best_first`), each under the place a reader would
cite and closed by an end mark, so the first mark the model meets is the best match's and it
can answer "... (p. 217)":

    ## File: contract.pdf (300 pages, too long to read whole: here are the 8 parts that best match
    the question, each under its page in brackets)

    [p. 217]
    ...
    [end of p. 217]

    [p. 12]
    ...
    [end of p. 12]

When nothing in a document matches (a question such as "summarise this" names none of its
words), the model reads its beginning, and the heading says so. `Reading.report()` is what a
reply says it read, for the chat page to show under the answer.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmpack.runtime.server.documents.extract import format_message
from llmpack.runtime.server.documents.index import DocumentIndex, Hit, Indexed, page_refs, query_terms

CANDIDATES = 64        # chunks tokenized at most per question: BM25's best, far more than a budget holds
MIN_ROOM = 32          # tokens: less room than this left in the budget and the search stops
MARGIN = 0.98          # token counts of parts are added; the joined text may tokenize a little longer


@dataclass(slots=True)
class Reading:
    """What the model reads of one long document for one question."""
    doc: Indexed
    hits: list[Hit]       # runs of neighbouring chunks, the best match's run first (_best_first)
    matched: bool         # False: no chunk matched the question, so `hits` is the beginning

    def title(self) -> str:
        size = f"{self.doc.pages:,} pages" if self.doc.pages else f"{self.doc.chars:,} characters"
        n = len(self.hits)
        what = "part" if n == 1 else f"{n} parts"
        unit = "page" if self.doc.pages else "place in the file"
        if not self.matched:
            why = f"no part of it matches the question, so here is its beginning ({what})"
        else:
            why = f"here {'is the part' if n == 1 else 'are the ' + what} that best match{'es' if n == 1 else ''} the question"
        # No "say its page": the server cites (attribution.py). Asked to, the 0.5B demo model
        # answered "Say which page says so." with only "[p. 7]"; without it, with the fact and
        # its page (docs/BENCHMARKS.md, documents).
        return f"{self.doc.name} ({size}, too long to read whole: {why}, each under its {unit} in brackets)"

    def body(self) -> str:
        """The chunks under their marks; neighbours with the same mark share one."""
        groups: list[list[Hit]] = []
        for h in self.hits:
            if groups and groups[-1][-1].label == h.label and groups[-1][-1].ord + 1 == h.ord:
                groups[-1].append(h)
            else:
                groups.append([h])
        return "\n\n".join(block(g[0], "\n".join(h.text for h in g)) for g in groups)

    def section(self) -> tuple[str, str]:
        """(heading, text) as documents.extract.format_message takes them."""
        return self.title(), self.body()

    def report(self) -> dict:
        """What the reply says the model read of this file (JSON)."""
        return {"file_id": self.doc.id, "filename": self.doc.name, "pages": self.doc.pages,
                "chunks": self.doc.chunks, "matched": self.matched,
                "parts": [{"label": h.label, "page": h.page, "heading": h.heading[-80:]} for h in self.hits]}


def block(hit: Hit, text: str | None = None) -> str:
    """One chunk as the model reads it: its mark, its text, and the mark again as an end mark.
    The end mark is there for small models: without it the 0.5B demo model cited the page
    whose mark came *after* the sentence it used (p. 254 for a fact on p. 217)."""
    where = f"[{hit.label}]" if not hit.heading or hit.page else f"[{hit.label}] ({hit.heading})"
    return f"{where}\n{hit.text if text is None else text}\n[end of {hit.label}]"


def read(index: DocumentIndex, docs: Sequence[Indexed], question: str, budget: int,
         count: Callable[[str], int]) -> list[Reading]:
    """The chunks of `docs` that best answer `question` and fit in `budget` tokens together
    with their headings (`count` measures a text in the model's tokens)."""
    if not docs:
        return []
    picked: dict[str, list[Hit]] = {d.id: [] for d in docs}
    # each heading is counted at its longest wording (the "no part matches" one), and once
    room = int(budget * MARGIN) - sum(count(format_message([(_longest_title(d), "")], "")) for d in docs)
    matched = {d.id: True for d in docs}
    candidates: list[Hit] = []
    for d in docs:
        if d.pages:
            candidates += index.on_pages(d.id, page_refs(question, d.pages))
    candidates += index.search([d.id for d in docs], question, CANDIDATES)
    if not candidates:   # nothing matches: the beginning of each document, in turn
        matched = {d.id: False for d in docs}
        heads = [index.first(d.id, CANDIDATES // len(docs) or 1) for d in docs]
        candidates = [h for group in zip(*heads) for h in group] + [h for g in heads for h in g[min(map(len, heads)):]]
    seen: set[tuple[str, int]] = set()

    def take(hit: Hit, may_trim: bool) -> None:
        nonlocal room
        if (hit.doc, hit.ord) in seen:
            return
        seen.add((hit.doc, hit.ord))
        cost = count(block(hit) + "\n\n")
        if cost > room and may_trim and not any(picked.values()):   # a small context: the best chunk, cut to fit
            hit = _trimmed(hit, question, room, count)
            cost = count(block(hit) + "\n\n") if hit else room + 1
        if cost <= room:
            picked[hit.doc].append(hit)
            room -= cost

    for hit in candidates[:CANDIDATES]:
        if room < MIN_ROOM:
            break
        take(hit, True)
    if any(matched.values()):   # room left: the text around the best matches, best first
        for hit in index.around([(h.doc, h.ord) for d in docs for h in picked[d.id]]):
            if room < MIN_ROOM:
                break
            take(hit, False)
    return [Reading(d, _best_first(picked[d.id]), matched[d.id]) for d in docs if picked[d.id]]


def _best_first(hits: list[Hit]) -> list[Hit]:
    """`hits` (in the order they were picked: best match first, neighbours last) as runs of
    neighbouring chunks, the run holding the best match first; within a run its best match
    first, then the chunks after it, then those before it (each in document order).
    Best first because a small model leans on what it reads first and copies the first mark it
    meets: in document order the 0.5B demo model answered from p. 217 but cited p. 150, and
    with a neighbour's end of p. 96 read before the best match it answered "[p. 96]" for a
    fact on p. 97."""
    rank = {h.ord: i for i, h in enumerate(hits)}
    runs: list[list[Hit]] = []
    for h in sorted(hits, key=lambda h: h.ord):
        if runs and runs[-1][-1].ord + 1 == h.ord:
            runs[-1].append(h)
        else:
            runs.append([h])
    out: list[Hit] = []
    for run in sorted(runs, key=lambda r: min(rank[h.ord] for h in r)):
        top = min(range(len(run)), key=lambda j: rank[run[j].ord])
        out += run[top:] + run[:top]
    return out


def _trimmed(hit: Hit, question: str, room: int, count: Callable[[str], int]) -> Hit | None:
    """`hit` cut to about `room` tokens from the sentence that holds most words of the question
    (their stems, roughly: "services" finds "serviced"), or None when not even that fits."""
    text = hit.text
    stems = [t[:max(4, len(t) - 2)] for t in query_terms(question)]
    best, at = 0, 0
    for m in re.finditer(r"[^.!?\n]+[.!?]?", text):
        sentence = m.group().lower()
        score = sum(1 for st in stems if st in sentence)
        if score > best:
            best, at = score, m.start()
    size = len(text)
    while size > 40:
        size = int(size * 0.8)
        start = max(0, min(at, len(text) - size))
        piece = ("…" if start else "") + text[start:start + size].strip() + ("…" if start + size < len(text) else "")
        cut = Hit(hit.doc, hit.ord, hit.page, hit.label, hit.heading, piece, hit.score)
        if count(block(cut) + "\n\n") <= room:
            return cut
    return None


def _longest_title(doc: Indexed) -> str:
    """The heading at its longest: 'no part matches' wording, a long mark, many parts."""
    stand_in = Hit(doc.id, 0, 0, "lines 99999-99999", "", "")
    return Reading(doc, [stand_in] * 99, False).title()
