"""The limits on every grammar llmpack hands llama.cpp, and the checks that enforce them.

A schema or grammar comes from the request, so it must not be able to make the converter or
llama.cpp work without end: one cap on a grammar's length (MAX_GRAMMAR_CHARS, whether sent as
GBNF or made from a schema or tools), on how deeply its ( ) groups nest (llama.cpp parses them
recursively, on the request's thread), and on the schema features whose grammar grows faster
than the schema does (repetition counts, pattern quantifiers, optional properties, nesting).
"""
from __future__ import annotations

import re

from llmpack.errors import LlmpackError

MAX_GRAMMAR_CHARS = 200_000     # any grammar: sent as GBNF, or made from a schema or tools
MAX_SCHEMA_CHARS = 200_000
MAX_SCHEMA_DEPTH = 32           # nested schema objects (OpenAI allows 10; llama.cpp recurses per level)
MAX_REPEAT = 1000               # min/maxItems, min/maxLength: llama.cpp refuses (x{0,1999})?, which 2000 makes
MAX_PATTERN_CHARS = 1000
MAX_PATTERN_REPEAT = 256        # a pattern's {m,n}: the converter writes each repetition out
MAX_OPTIONAL_PROPERTIES = 256   # the converter's work grows with their square
MAX_NESTING = 64                # ( ) groups inside one another: llama.cpp parses them recursively
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")


class GrammarError(LlmpackError, ValueError):
    """A schema or grammar that cannot be used; the message says what is wrong (HTTP 400)."""


TOKEN = re.compile(r"""
    (?P<ws>[ \t]+) | (?P<comment>\#[^\n]*) | (?P<nl>\r?\n) |
    (?P<define>::=) | (?P<name>[A-Za-z0-9-]+) |
    (?P<literal>"(?:\\.|[^"\\\n])*") | (?P<cls>\[(?:\\.|[^\]\\\n])*\]) | (?P<token><\[?[^>\n]*\]?>) |
    (?P<op>[|()*+?.]) | (?P<rep>\{\s*\d+\s*(?:,\s*\d*\s*)?\})
""", re.VERBOSE)


def check_size(gbnf: str, what: str) -> None:
    """The one cap on any grammar llama.cpp is given: its length, and how deeply ( ) nest."""
    if len(gbnf) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"{what} is too large ({len(gbnf)} characters; at most {MAX_GRAMMAR_CHARS}): "
                           "simplify the schema (fewer properties, enum values or repetitions)")
    depth = deepest = 0
    for m in TOKEN.finditer(gbnf):
        if m.lastgroup == "op" and m.group() in "()":
            depth += 1 if m.group() == "(" else -1
            deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        raise GrammarError(f"{what} nests ( ) groups {deepest} deep; at most {MAX_NESTING}")


def repeat(item: str, low: int, high: int | None, sep: str = "") -> str:
    """`item` low..high times (high None: no limit), with GBNF's own {m,n} (llama.cpp unrolls it
    into flat rules) instead of the converter's nested optional groups, which llama.cpp would
    parse recursively: one level per repetition. As llama.cpp's json-schema-to-grammar does."""
    if high == 0:
        return ""
    if low == 0 and high == 1:
        return f"{item}?"
    if not sep:
        if high is None and low <= 1:
            return f"{item}{'+' if low else '*'}"
        return f"{item}{{{low},{'' if high is None else high}}}"
    rest = repeat(f"({sep} {item})", max(low - 1, 0), None if high is None else high - 1)
    return f"{item} {rest}" if low else f"({item} {rest})?"


def check_counts(node: dict, path: str) -> None:
    """Repetition counts, patterns and optional properties within what the converter and
    llama.cpp handle in bounded time and memory (`minItems: 10**9` once built a 10**9-item list)."""
    for key in _COUNTS:
        value = node.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPEAT):
            raise GrammarError(f"{path}.{key} must be a whole number from 0 to {MAX_REPEAT}")
    for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
        if node.get(low, 0) > node.get(high, MAX_REPEAT):
            raise GrammarError(f"{path}.{low} is more than {path}.{high}: no value can match")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        if len(pattern) > MAX_PATTERN_CHARS:
            raise GrammarError(f"{path}.pattern is longer than {MAX_PATTERN_CHARS} characters")
        for number in re.findall(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}", pattern):
            if any(n and int(n) > MAX_PATTERN_REPEAT for n in number):
                raise GrammarError(f"{path}.pattern repeats something more than {MAX_PATTERN_REPEAT} times")
    props = node.get("properties")
    if isinstance(props, dict):
        required = node.get("required") if isinstance(node.get("required"), list) else []
        if len(set(props) - {r for r in required if isinstance(r, str)}) > MAX_OPTIONAL_PROPERTIES:
            raise GrammarError(f"{path} has more than {MAX_OPTIONAL_PROPERTIES} optional properties; "
                               "list the ones that must appear in 'required'")
