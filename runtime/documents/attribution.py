"""Which place of the documents supports which sentence of a reply: sources the server computes,
not the model (a 0.5B model copies the first page mark it meets, right or not).

After a reply that read documents, each of its sentences (a "claim") is compared with every
sentence of the places the model was given (documents/places.py). Words are compared as rough
stems ("serviced" and "services" meet), stop words left out; each word weighs by how rare it
is among those sentences (inverse document frequency), and a word with a digit in it (a
serial, a date, an amount) weighs NUMBER_WEIGHT times more, since it is what a fact hangs on.
The words the question itself used weigh half: repeating the question proves nothing.

A claim is attributed to the document sentence that covers the most of its weight, and only
when the support is clear; otherwise the server abstains and shows nothing rather than a wrong
place:

- at least MIN_COVER of the claim's weight is found in that one sentence, by at least two words,
  one of them without a digit: a number alone is no source ("… is covered in Section 7" once
  had a line that starts with "7." and is about something else as its source);
- every number of the claim (that the question did not bring) is in that sentence: a reply
  with a wrong serial is not attributed to the sentence that holds the right one;
- the sentence names no one else where the claim names someone: a claim with a name the
  sentence lacks, beside a name of the sentence the claim lacks, contradicts it;
- no sentence of another place supports it as well (the same line on every page of a manual
  cannot say which page), nor two near sentences of another file (a licence's title and the
  version line under it, against a guide's footnote naming that licence and version: which file
  the person asked about is unknowable). Within one file the best single sentence stands: the
  file says it, and that sentence says it most tightly (fntguide.pdf states what fontenc is for
  on p. 7 over two sentences and on p. 22 in one; both are right).

A claim that joins two near sentences of one place (a quarter of its weight or more missing
from the best one, half of that in a sentence at most three away) is quoted from the first of
them to the last, so the reader finds all of it. So is a claim whose best sentence lacks a word
the question asked about (the subject: "a C function's body") that a sentence at most ASKED_REACH
away holds with much of the claim: the model took the rest from a neighbour about something else
("a 'struct' body can go in column one if you find it useful"), and that quote alone would show
a reader the other thing. When the two were read as passages side by side, the source is the
sentence that holds the subject.

A table-of-contents line (documents/layout.py) is never a source: it names a section, it does
not state what the section says. A reference to a section ("Section 7", "see sections 15 and
16", "§ 4.2") is a place, like a page mark, not a word of the claim or of the sentence, so a
cross-reference never stands for the section it names. Sentences run across the lines a file
wraps them over (documents/words.py), so a reply that repeats a wrapped sentence finds it whole.

Page marks the model wrote ("[p. 96]", "page 96", "(p. 96)") are not words of the claim; each
source says which mark the model wrote in that claim and whether the server's place agrees.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from llmpack.runtime.documents import layout
from llmpack.runtime.documents.places import Place
from llmpack.runtime.documents.words import has_digit, sentences, terms

MIN_COVER = 0.5          # share of a claim's weight one document sentence must hold
NUMBER_WEIGHT = 3.0      # a word with a digit: a serial, a date, an amount
QUESTION_WEIGHT = 0.5    # a word the question used
TIE = 1e-6
BLEND_SHARE = 0.25       # a claim whose best sentence lacks this share of its weight may join two sentences
BLEND_REACH = 3          # ... of the same place, this many sentences apart at most
ASKED_REACH = 6          # sentences apart at most: the one that holds a word of the question the best one lacks
BESIDE_LINES = 3         # lines between two passages of a text file that count as read side by side

# A place as a model writes it: "[p. 96]", "[end of p. 96]", "[§ Terms]", "[lines 3-9]", "(p. 96)",
# "page 96", "pages 3-5", "p. 96", "pp. 3-5", "line 203".
_MARK = re.compile(r"\[(?:end of )?(?:p\.|pp\.|pages?|§|lines?)[^\]\n]{0,80}\]"
                   r"|\((?:p\.|pp\.|pages?)\s*\d[\d\s,–-]*\)"
                   r"|\b(?:pages?|pp?\.|lines?)\s*\d{1,6}(?:\s*(?:-|–|to|and)\s*\d{1,6})?", re.I)
_NUMBER = re.compile(r"\d{1,5}")
# a reference to a section: a place, not a fact ("Section 7", "sections 15 and 16", "§ 4.2", "Kapitel 3")
_SECTION_REF = re.compile(r"(?:\b(?:sections?|sect\.|chapters?|ch\.|appendix|appendices|abschnitt|kapitel|anhang"
                          r"|chapitre|annexe|sección|capítulo)|§§?)\s*[A-Z]?\d{1,3}(?:\.\d{1,3})*"
                          r"(?:\s*(?:,|and|or|to|und|et|y|-|–)\s*[A-Z]?\d{1,3}(?:\.\d{1,3})*)*", re.I)
# a name: a capitalised word that does not start its sentence ("by Leslie Lamport")
_NAME = re.compile(r"(?<=[^\s.!?:(\[\"'“‘])\s+([A-Z][a-z]{2,})\b")


@dataclass(frozen=True, slots=True)
class Source:
    """One claim of a reply and the place that supports it."""
    place: Place
    quote_start: int       # the supporting sentence in place.text
    quote_end: int
    reply_start: int       # the claim in the reply
    reply_end: int
    model_mark: str | None = None    # the place the model wrote in that claim, as written ("[p. 96]")
    mark_right: bool | None = None   # whether it names the server's place (None: the model wrote none)

    @property
    def quote(self) -> str:
        return self.place.text[self.quote_start:self.quote_end]

    @property
    def lines(self) -> tuple[int, int] | None:
        """The quote's lines in the file (plain text cut by lines)."""
        p = self.place
        if not p.first_line:
            return None
        first = p.first_line + p.text.count("\n", 0, self.quote_start)
        return first, first + p.text.count("\n", self.quote_start, self.quote_end)

    @property
    def where(self) -> str:
        """What a reader cites: "p. 97", "§ Termination", "line 131"."""
        lines = self.lines
        if lines:
            return f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]}-{lines[1]}"
        return self.place.label

    def to_json(self) -> dict:
        """The chat completion's `sources` entry (README, "Sources"). Its context is the place's
        text with the lines that only wrap a sentence joined (layout.reflow: the same length, the
        same offsets), as a reader should see it."""
        p, lines = self.place, self.lines
        context = layout.reflow(p.text)
        return {"file": p.file, "file_id": p.file_id, "page": p.page or None, "section": p.section,
                "lines": list(lines) if lines else None, "label": f"{p.file} · {self.where}",
                "quote": context[self.quote_start:self.quote_end], "context": context,
                "quote_start": self.quote_start, "quote_end": self.quote_end,
                "reply_start": self.reply_start, "reply_end": self.reply_end,
                "model_mark": self.model_mark, "mark_right": self.mark_right}


@dataclass(slots=True)
class _Unit:
    place: int
    start: int
    end: int
    terms: frozenset[str]
    names: frozenset[str] = frozenset()


class Attribution:
    """The places one request's model read, ready to attribute its replies to (one per choice)."""

    def __init__(self, places: Sequence[Place], question: str = "") -> None:
        self.places = list(places)
        self.question = frozenset(terms(question))
        self.question_names = _names(question)
        # the files' names: "inventory-26.csv" in a reply is not the number 26 of a claim
        names = sorted({p.file for p in self.places if p.file}, key=len, reverse=True)
        self._names = re.compile("|".join(map(re.escape, names)) if names else r"(?!)", re.I)
        self._units: list[_Unit] = []
        self._by_term: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(self.places):
            contents = layout.contents_lines(p.text)
            for a, b in sentences(p.text):
                if any(x <= a and b <= y for x, y in contents):
                    continue   # a contents line names a section; it states nothing
                t = frozenset(terms(_SECTION_REF.sub(" ", p.text[a:b])))
                if t:
                    for term in t:
                        self._by_term[term].append(len(self._units))
                    self._units.append(_Unit(i, a, b, t, _names(p.text[a:b])))

    def __bool__(self) -> bool:
        return bool(self.places)

    def weight(self, term: str, asked: bool = True) -> float:
        """How much `term` says: rare words more, numbers triple, the question's own words half
        (`asked`: False counts them whole)."""
        n = len(self._units)
        w = math.log(1 + (n + 1) / (len(self._by_term.get(term, ())) + 1))
        if has_digit(term):
            w *= NUMBER_WEIGHT
        return w * (QUESTION_WEIGHT if asked and term in self.question else 1.0)

    def sources(self, reply: str) -> list[Source]:
        """The sources of `reply`'s claims that the places clearly support, in reply order."""
        out = []
        for a, b in claims(reply):
            found = self._support(self._names.sub(" ", _SECTION_REF.sub(" ", _MARK.sub(" ", reply[a:b]))))
            if found is None:
                continue
            first, last = self._units[found[0]], self._units[found[1]]
            place = self.places[first.place]
            mark = _MARK.search(reply, a, b)
            out.append(Source(place, first.start, last.end, a, b, mark.group() if mark else None,
                              _agrees(mark.group(), place) if mark else None))
        return out

    def _support(self, claim: str) -> tuple[int, int] | None:
        """The units (first, last: one sentence, or a run of them) that clearly support `claim`,
        or None (abstain)."""
        mine = set(terms(claim))
        if not mine:
            return None
        w = {t: self.weight(t) for t in mine}
        total = sum(w.values())
        scored: dict[int, float] = defaultdict(float)
        for t in mine:
            for u in self._by_term.get(t, ()):
                scored[u] += w[t]
        if not scored:
            return None
        # most weight covered; then the tightest sentence (fewest words of its own); then read first
        ranked = sorted(scored, key=lambda u: (-scored[u], len(self._units[u].terms), u))
        best = ranked[0]
        matched = mine & self._units[best].terms
        if scored[best] < MIN_COVER * total or len(matched) < 2 or all(map(has_digit, matched)):
            return None   # too little of the claim, or numbers alone
        if any(has_digit(t) for t in mine - matched - self.question):   # a number the place does not hold
            return None
        theirs = self._units[best].names
        names = _names(claim)
        if names - theirs - self.question_names and theirs - names:   # another name beside the same words
            return None
        where, own = self._where(best), self._paired(best, mine, w)
        for other in ranked[1:]:
            if scored[other] < min(scored[best], own / 2) - TIE:
                break   # past here no sentence, nor one and a near one (one holds half of a pair), is as good
            if self._where(other) == where:
                continue
            if scored[other] >= scored[best] - TIE:
                return None   # as well supported elsewhere: which place is unknowable
            if where[0] != self._where(other)[0] and self._paired(other, mine, w) >= own - TIE:
                return None   # another file says it as well, over two sentences: which file is unknowable
        full = {t: self.weight(t, asked=False) for t in mine}   # the question's words count whole here
        asked = self._asked(best, (mine - matched) & self.question, mine, full)
        if asked is not None and self._units[asked].place == self._units[best].place:
            return min(best, asked), max(best, asked)
        if asked is not None:   # a passage beside best's: a quote cannot span two, so the one with the subject
            unstated = {t for t in mine - self._units[asked].terms - self.question if has_digit(t)}
            return None if unstated else (asked, asked)
        return self._joined(best, mine - matched, full, sum(full.values()))

    def _paired(self, unit: int, mine: set[str], w: dict[str, float]) -> float:
        """The claim's weight that `unit` holds, with the sentence at most BLEND_REACH away in its
        place that adds the most: how well that place supports the claim when a title and the
        line under it say it together (lppl.pdf's "The LaTeX Project Public License" over "LPPL
        Version 1.3c" against usrguide.pdf's footnote naming the same licence and version)."""
        have = mine & self._units[unit].terms
        best = sum(w[t] for t in have)
        place = self._units[unit].place
        for v in range(max(0, unit - BLEND_REACH), min(len(self._units), unit + BLEND_REACH + 1)):
            if v != unit and self._units[v].place == place:
                best = max(best, sum(w[t] for t in have | (mine & self._units[v].terms)))
        return best

    def _asked(self, best: int, missing: set[str], mine: set[str], w: dict[str, float]) -> int | None:
        """A sentence near `best` that holds the words of the question the claim used and `best`
        lacks, and MIN_COVER of the claim as well (a rival reading of it, not a table's column
        names): the one that holds most of the claim, then the nearest. Near: at most ASKED_REACH
        sentences away in `best`'s place, or in a passage read beside it (`_beside`: a shorter
        reading cut the GNU standards' C-function sentence and the struct sentence after it
        into two). None when there is none."""
        if not missing:
            return None
        place, total = self._units[best].place, sum(w.values())
        beside = {i for i, p in enumerate(self.places) if i != place and _beside(p, self.places[place])}
        near = [u for u in range(max(0, best - ASKED_REACH), min(len(self._units), best + ASKED_REACH + 1))
                if u != best and self._units[u].place == place]
        near += [u for u, x in enumerate(self._units) if x.place in beside]
        cover = {u: sum(w[t] for t in mine & self._units[u].terms) for u in near if missing <= self._units[u].terms}
        rivals = [u for u, c in cover.items() if c >= MIN_COVER * total]
        return max(rivals, key=lambda u: (cover[u], -abs(u - best)), default=None)

    def _joined(self, best: int, missing: set[str], w: dict[str, float], total: float) -> tuple[int, int]:
        """`best`, or the run of sentences from it to a near one of the same place that holds
        the claim's words `best` lacks: a small model joins two sentences it read side by side
        into one ("In any shell type su -l; this does NOT keep the environment" from two lines
        of a list), and the quote is then both, not the half that holds most of the claim (the
        real corpus's two wrong sources were such halves)."""
        lacking = sum(w[t] for t in missing)
        if lacking < BLEND_SHARE * total:
            return best, best
        place = self._units[best].place
        near = [u for u in range(max(0, best - BLEND_REACH), min(len(self._units), best + BLEND_REACH + 1))
                if u != best and self._units[u].place == place]
        gain = {u: sum(w[t] for t in missing & self._units[u].terms) for u in near}
        other = max(near, key=lambda u: (gain[u], -abs(u - best)), default=None)
        if other is None or gain[other] < lacking / 2:
            return best, best
        return min(best, other), max(best, other)

    def _where(self, unit: int) -> tuple[str, str]:
        p = self.places[self._units[unit].place]
        return p.file_id, p.label


def claims(reply: str) -> list[tuple[int, int]]:
    """The reply's sentences that say something, with the marks around them: a fragment that is
    only a mark ("(p. 96)", "It is on page 96.") joins the claim before it, or the one after it
    when it leads the reply."""
    out: list[list[int]] = []
    lead: int | None = None
    for a, b in sentences(reply):
        piece = reply[a:b]
        if terms(_MARK.sub(" ", piece)):
            out.append([lead if lead is not None else a, b])
            lead = None
        elif _MARK.search(piece):
            if out:
                out[-1][1] = b
            elif lead is None:
                lead = a
    return [(a, b) for a, b in out]


def _beside(a: Place, b: Place) -> bool:
    """Whether two places read are passages of one file at most BESIDE_LINES lines apart (plain
    text cut by lines) or on one page."""
    if a.file_id != b.file_id:
        return False
    if a.first_line and b.first_line:
        lo, hi = sorted((a, b), key=lambda p: p.first_line)
        return hi.first_line - (lo.first_line + lo.text.count("\n")) <= BESIDE_LINES
    return bool(a.page) and a.page == b.page


def _names(text: str) -> frozenset[str]:
    """The names of `text`, as the claim's terms spell them."""
    return frozenset(t for m in _NAME.finditer(text) for t in terms(m.group(1)))


def _agrees(mark: str, place: Place) -> bool:
    """Whether a mark the model wrote names `place`."""
    if place.page and re.search(r"p\.|pp\.|page", mark, re.I):
        nums = [int(n) for n in _NUMBER.findall(mark)]
        if len(nums) == 2 and nums[0] < nums[1] <= nums[0] + 20:
            return nums[0] <= place.page <= nums[1]
        return place.page in nums
    if place.first_line and re.match(r"\[?(?:end of )?lines?\b", mark.strip(), re.I):
        nums = [int(n) for n in re.findall(r"\d+", mark)]
        last = place.first_line + place.text.count("\n")
        return bool(nums) and place.first_line <= nums[0] and nums[-1] <= last
    inner = re.sub(r"^\[(?:end of )?|\]$", "", mark.strip()).lower()
    return inner == place.label.lower() or bool(place.section and place.section.lower() in inner)
