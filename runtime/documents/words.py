"""Sentences and rough stems: how the documents code compares a question or a reply with a
document's text, one definition for both users (excerpts.py picks the sentences a question
matches; attribution.py finds the sentence that supports a claim of the reply).

Stems are rough on purpose ("serviced" and "services" meet at "servic"), and the same for every
script Python calls word characters; stop words are the index's (documents/index.py).
"""
from __future__ import annotations

import re

from llmpack.runtime.documents.index import STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)
_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|\s*\n\s*")
_ABBREV = re.compile(r"(?:\b(?:p|pp|no|nr|e\.g|i\.e|vs|st|dr|mr|mrs|ms|fig|approx|ca|cf|etc)\.)$", re.I)


def terms(text: str) -> list[str]:
    """The words of `text` that carry meaning, as rough stems."""
    out = []
    for w in _WORD.findall(text.lower()):
        if w in STOPWORDS or (len(w) < 2 and not w.isdigit()):
            continue
        out.append(_stem(w))
    return out


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
    """(start, end) of the sentences and lines of `text`, without surrounding white space."""
    out, start = [], 0
    for m in _END.finditer(text):
        if "\n" not in m.group() and _ABBREV.search(text, max(0, m.start() - 6), m.start()):
            continue   # "p. 97", "e.g. this": not the end of a sentence
        if text[start:m.start()].strip():
            out.append((start, m.start()))
        start = m.end()
    if text[start:].strip():
        out.append((start, len(text.rstrip())))
    return out
