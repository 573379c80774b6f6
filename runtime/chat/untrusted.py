"""Text that comes from a file or a tool, kept as text all the way into the prompt's tokens.

A rendered prompt is tokenized with special tokens parsed, so the template's own
`<|im_start|>system` becomes the model's control tokens. A PDF, a web page a tool fetched, or a
tool's JSON can hold the same characters; parsed the same way they would open a system turn of
the attacker's choosing. So such text is wrapped in two private-use marker characters before the
template renders it (`mark`), and `tokenize` cuts the rendered prompt at the markers: the
template's parts are tokenized with special tokens parsed, the marked parts as plain text.

The markers are U+E000 and U+E001 (private use: no tokenizer gives them meaning, and no real
document needs them); `mark` removes any that the text itself holds, so a file cannot close its
own span early. A template that drops or reorders them cannot make marked text special: after
an opening marker everything is plain until the closing one.
"""
from __future__ import annotations

from typing import Callable

OPEN, CLOSE = "\ue000", "\ue001"
Tokenize = Callable[..., list[int]]   # (text, add_special=..., parse_special=...) -> ids


def clean(text: str) -> str:
    """`text` without marker characters."""
    return text.replace(OPEN, "").replace(CLOSE, "") if OPEN in text or CLOSE in text else text


def mark(text: str) -> str:
    """Wrap untrusted text so that `tokenize` keeps it plain."""
    return f"{OPEN}{clean(text)}{CLOSE}"


def spans(prompt: str) -> list[tuple[str, bool]]:
    """The rendered prompt as (text, is_untrusted) pieces, markers removed, empty pieces dropped."""
    out: list[tuple[str, bool]] = []
    pos, inside = 0, False
    while pos <= len(prompt):
        stop = prompt.find(CLOSE if inside else OPEN, pos)
        end = len(prompt) if stop < 0 else stop
        piece = prompt[pos:end]
        if not inside:
            piece = piece.replace(CLOSE, "")   # a stray closing marker outside any span
        if piece:
            out.append((piece, inside))
        if stop < 0:
            break
        pos, inside = stop + 1, not inside
    return out


def tokenize(prompt: str, tokenize_fn: Tokenize, *, add_special: bool = True) -> list[int]:
    """Token ids of a rendered prompt: marked spans as plain text, the rest with special tokens
    parsed; `add_special` (BOS) once, at the start. A prompt without markers is tokenized whole."""
    if OPEN not in prompt and CLOSE not in prompt:
        return tokenize_fn(prompt, add_special=add_special, parse_special=True)
    ids: list[int] = []
    for i, (piece, untrusted) in enumerate(spans(prompt)):
        ids += tokenize_fn(piece, add_special=add_special and i == 0, parse_special=not untrusted)
    if not ids and add_special:
        ids = tokenize_fn("", add_special=True, parse_special=True)
    return ids
