"""Scripts written without spaces between words (Chinese, Japanese): how they are searched and
compared.

FTS5's unicode61 tokenizer, like `\\w+`, takes a run of CJK characters as one token: a whole
clause of Japanese is one "word", so a question that names a word inside it finds nothing, and
a reply that repeats it is never matched. Both the index (documents/index.py: its `grams`
column) and the comparison of a reply with the text (documents/words.py) cut such runs into
overlapping pairs of characters (bigrams), as CJK search engines without a dictionary do: two
characters are the commonest length of a word in both languages, and a longer word is all of
its pairs, in a row.
"""
from __future__ import annotations

import re

# Han (with extension A and compatibility ideographs), hiragana, katakana (and half-width), Hangul syllables
CJK = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af]+")


def has_cjk(text: str) -> bool:
    return CJK.search(text) is not None


def bigrams(run: str) -> list[str]:
    """The overlapping pairs of a run of CJK characters; a run of one character is itself."""
    return [run] if len(run) < 2 else [run[i:i + 2] for i in range(len(run) - 1)]


def split_word(word: str) -> list[tuple[str, bool]]:
    """A `\\w+` word as its pieces, each marked True when it is a CJK run ("psコマンド" ->
    [("ps", False), ("コマンド", True)])."""
    out, at = [], 0
    for m in CJK.finditer(word):
        if m.start() > at:
            out.append((word[at:m.start()], False))
        out.append((m.group(), True))
        at = m.end()
    if at < len(word):
        out.append((word[at:], False))
    return out


def grams(text: str) -> str:
    """The bigrams of every CJK run of `text`, space-separated: what the index's `grams` column
    holds ("" for text without CJK, so other languages cost nothing)."""
    return " ".join(g for m in CJK.finditer(text) for g in bigrams(m.group()))
