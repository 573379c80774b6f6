"""Sentences and rough stems: how the documents code compares a question or a reply with a
document's text, one definition for both users (excerpts.py picks the sentences a question
matches; attribution.py finds the sentence that supports a claim of the reply).

Stems are rough on purpose ("serviced" and "services" meet at "servic"), and the same for every
script Python calls word characters, except runs of Chinese or Japanese, which have no spaces
between words and are compared as overlapping pairs of characters (documents/scripts.py); stop
words are the index's (documents/index.py).

A sentence runs across the lines a file wraps it over (a typeset PDF, text wrapped at 72
columns): a newline ends one only where documents/layout.py says the break is hard. A word
hyphenated at a line end ("com-" + "mands") is compared as the one word it is.
"""
from __future__ import annotations

import re

from llmpack.runtime.documents import layout
from llmpack.runtime.documents.index import STOPWORDS
from llmpack.runtime.documents.scripts import bigrams, split_word

MIN_MEET = 5   # letters two forms of a word share at the start (`meet`)
WORD = re.compile(r"\w+", re.UNICODE)
DATE_WORDS = frozenset({"date", "dated", "datum", "fecha", "日付", "日時"})
YEAR_WORDS = frozenset({"year", "jahr", "année", "annee", "año", "anno", "jaar"})
_MONTH = (r"(?:january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar"
          r"|apr|jun|jul|aug|sept?|oct|nov|dec|januar|februar|märz|mai|juni|juli|oktober|dezember|janvier|février"
          r"|mars|avril|juin|juillet|août|septembre|octobre|novembre|décembre)\b\.?")
_DATE = re.compile(r"\b(?:1[5-9]|20)\d\d[-/.](?:0?[1-9]|1[0-2])[-/.](?:[0-2]?\d|3[01])\b"
                   r"|\b(?:[0-2]?\d|3[01])[./](?:0?[1-9]|1[0-2])[./](?:1[5-9]|20)\d\d\b"
                   rf"|\b(?:[0-3]?\d\.?\s+)?{_MONTH}\s+(?:[0-3]?\d,?\s+)?(?:1[5-9]|20)\d\d\b"
                   r"|(?:1[5-9]|20)\d\d年\d{1,2}月(?:\d{1,2}日)?", re.I)
_YEAR = re.compile(r"(?<![\d.])(?:1[5-9]|20)\d\d(?![\d.])")
_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|(?<=[。！？])[」』”’）]*\s*|[ \t]*\n\s*")
_HYPHENATED = re.compile(r"(?<=[^\W\d_])-[ \t]*\n\s*(?=[^\W\d_])")
_ABBREV = re.compile(r"(?:\b(?:p|pp|no|nr|e\.g|i\.e|vs|st|dr|mr|mrs|ms|fig|approx|ca|cf|etc|z\.b|bzw|vgl)\.)$", re.I)
_NUMBER_ONLY = re.compile(r"\s*[A-Z]?\d{1,3}(?:\.\d{1,3})*\.")
_INITIAL = re.compile(r"(?:^|[\s(])[A-Z]\.$")   # "Donald E. Knuth"


def terms(text: str, letters: bool = False) -> list[str]:
    """The words of `text` that carry meaning, as rough stems. With `letters`, a letter standing
    alone is one too, as written ("argument type m", "the option -l"; not the "s" of "it's" nor
    a stop word): excerpts.py looks for the sentence that names it, as a list of argument types or
    options does ("m  A standard mandatory argument")."""
    out = []
    joined = _HYPHENATED.sub("", text)
    for m in WORD.finditer(joined):
        word = m.group().lower()
        if letters and len(word) == 1 and word.isalpha() and word.isascii() and word not in STOPWORDS \
                and not elided(joined, m.start()):
            out.append(m.group())
            continue
        for w, cjk in split_word(word):
            if cjk:
                out += bigrams(w)
            elif w not in STOPWORDS and (len(w) > 1 or w.isdigit()):
                out.append(_stem(w))
    return out


def elided(text: str, start: int) -> bool:
    """Whether the word at `start` is the tail of a contraction ("s" of "it's", "re" of "you're")."""
    return text[start - 1:start] in ("'", "’")


def meet(a: str, b: str) -> bool:
    """Whether two stems (`terms`) are one word's forms: equal, or both longer than MIN_MEET letters
    and sharing their first MIN_MEET letters and all but one of the shorter one's. That is how
    German and other inflected languages vary a word at its end, which the English suffixes of
    `_stem` do not know: "drückt" meets "drücken" and "modifie(r)" meets "modify", while
    "install" does not meet "instanc(e)"."""
    if a == b:
        return True
    if not (a.isalpha() and b.isalpha()) or min(len(a), len(b)) <= MIN_MEET:
        return False
    shared = 0
    for x, y in zip(a, b):
        if x != y:
            break
        shared += 1
    return shared >= MIN_MEET and shared >= min(len(a), len(b)) - 1


class Matcher:
    """The stems of a question that a text's stems meet (`meet`), each text word looked at once."""

    def __init__(self, wanted: set[str] | frozenset[str]) -> None:
        self.wanted = frozenset(wanted)
        self._seen: dict[str, frozenset[str]] = {}

    def __call__(self, words: list[str] | set[str]) -> frozenset[str]:
        out: set[str] = set()
        for w in set(words):
            found = self._seen.get(w)
            if found is None:
                found = self._seen[w] = frozenset(t for t in self.wanted if meet(t, w))
            out |= found
        return frozenset(out)


def answers(text: str) -> frozenset[str]:
    """The question words (as stems) that `text` answers by its form, not its words: a date
    ("2008-05-04", "4 May 2008", "2008年5月4日") answers "date" and "year", a year alone
    "year". "What is the date of this version?" is answered by "LPPL Version 1.3c 2008-05-04",
    which holds no word "date"; without this, every sentence that says "version" ranked with it."""
    if _DATE.search(text):
        return DATE_WORDS | YEAR_WORDS
    if _YEAR.search(text):
        return YEAR_WORDS
    return frozenset()


def has_digit(term: str) -> bool:
    return any(ch.isdigit() for ch in term)


def _stem(word: str) -> str:
    if not word.isalpha():
        return word
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[:-len(suffix)]
            break
    return word[:7]


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of the sentences of `text` (and of its lines that stand alone: a heading, a
    table row, a CSV record), without surrounding white space."""
    out, start = [], 0
    margin = layout.width(text)
    contents = layout.contents_lines(text)   # a contents line is one unit, its dot leaders no sentence ends
    for m in _END.finditer(text):
        if "\n" not in m.group() and any(a <= m.start() < b for a, b in contents):
            continue
        if m.group().count("\n") <= 1 and (_ABBREV.search(text, max(0, m.start() - 6), m.start())
                                            or _INITIAL.search(text, max(0, m.start() - 3), m.start())):
            continue   # "p. 97", "e.g. this", "Donald E. Knuth": not the end of a sentence
        if "\n" not in m.group() and _NUMBER_ONLY.fullmatch(text, text.rfind("\n", 0, m.start()) + 1, m.start()):
            continue   # "1.1.5. GUI tools": a section's number, not a sentence
        if "\n" not in m.group() and m.end() < len(text) and (text[m.end()].islower() or text[m.end()] in ")],;"):
            continue   # "'if (... )' over", "approx. five": a sentence does not start so
        if m.group().count("\n") == 1 and not text[max(0, m.start() - 1)] in ".!?。！？" \
                and layout.soft_break(text, m.start() + m.group().index("\n"), margin):
            continue   # a line the file wrapped: the sentence goes on
        if text[start:m.start()].strip():
            out.append((start, m.start()))
        start = m.end()
    if text[start:].strip():
        out.append((start, len(text.rstrip())))
    return out
