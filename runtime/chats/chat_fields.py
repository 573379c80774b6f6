"""The checks a saved reply's lists share (its sources, chat_sources.py; its tool rounds,
chat_tools.py): a list of at most so many objects, each field's text capped and scrubbed. A bad
entry raises FieldError whose message starts with where it is ("[2].page must be ..."), so that
chat_shape can put the message's field before it ("messages[3].sources[2].page ...")."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from llmpack.runtime.core.params import scrub   # lone surrogates -> U+FFFD, as requests get

T = TypeVar("T")


class FieldError(ValueError):
    """A saved entry the store refuses; the message starts with where in the list it is."""


def each(items: Any, most: int, noun: str, check: Callable[[Any, str], T]) -> list[T]:
    """`check(item, "[k]")` for each item of a list of at most `most` `noun`."""
    if not isinstance(items, list) or len(items) > most:
        raise FieldError(f" must be a list of at most {most} {noun}")
    return [check(item, f"[{k}]") for k, item in enumerate(items)]


def fields(item: Any, where: str) -> dict:
    if not isinstance(item, dict):
        raise FieldError(f"{where} must be an object")
    return item


def text(item: dict, key: str, limit: int, where: str, *, optional: bool = False) -> str | None:
    """`item[key]` as text of at most `limit` characters (or None when optional and missing)."""
    value = item.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise FieldError(f"{where}.{key} must be text of at most {limit:,} characters" + (", or null" if optional else ""))
    return scrub(value)
