"""GBNF for integers within bounds: JSON schema's minimum / maximum / exclusive* on integers.

A grammar cannot compare numbers, but the decimal strings of a range of integers form a
regular language: split the range by digit count, and within one digit count by the first
digit where the bounds differ (the classic regex-for-a-numeric-range construction).

The size is linear in the number of digits: below the first differing digit only one side of
the range is still bounded ("at least 372" or "at most 519" over the remaining digits), and a
run of free digits is one `[0-9]{k}`. (Recursing into both sides at every digit, as this module
once did, doubled the grammar per digit: 19 MB for 0..10**19-1.) Bounds beyond what the
converter's integers can hold (MAX_DIGITS) are clamped to it, so `maximum: 1e30` means "no
upper bound" instead of a grammar the size of the number.
"""
from __future__ import annotations

import math

MAX_DIGITS = 16        # the converter's own integers have at most 16 digits
LIMIT = 10 ** MAX_DIGITS - 1
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")   # the schema keys enforced here


def _free(k: int) -> str:
    return "" if k == 0 else "[0-9]" if k == 1 else f"[0-9]{{{k}}}"


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _one_side(digits: str, low: bool) -> str:
    """Digit strings of len(digits) that are >= digits (`low`) or <= digits (leading zeros allowed:
    a tail of a number). Linear in the number of digits: each level adds one alternative."""
    if digits.strip("0" if low else "9") == "":
        return _free(len(digits))
    first = int(digits[0])
    if len(digits) == 1:
        return f"[{first}-9]" if low else f"[0-{first}]"
    alts = [_seq(f'"{digits[0]}"', f"({_one_side(digits[1:], low)})")]
    if first != (9 if low else 0):
        alts.append(_seq(f"[{first + 1}-9]" if low else f"[0-{first - 1}]", _free(len(digits) - 1)))
    return " | ".join(alts)


def _at_least(lo: str) -> str:
    return _one_side(lo, low=True)


def _at_most(hi: str) -> str:
    return _one_side(hi, low=False)


def _same_length(lo: str, hi: str) -> str:
    """Decimal strings of equal length from lo to hi (lo <= hi), as a GBNF expression."""
    common = 0
    while common < len(lo) and lo[common] == hi[common]:
        common += 1
    prefix = f'"{lo[:common]}"' if common else ""
    lo, hi = lo[common:], hi[common:]
    if not lo:
        return prefix
    if len(lo) == 1:
        return _seq(prefix, f"[{lo}-{hi}]")
    rest = len(lo) - 1
    # first digits whose every tail is in range share one class: lo's if its tail is all 0s,
    # hi's if its tail is all 9s, and every digit between
    low = int(lo[0]) if lo[1:].strip("0") == "" else int(lo[0]) + 1
    high = int(hi[0]) if hi[1:].strip("9") == "" else int(hi[0]) - 1
    alts = [] if low == int(lo[0]) else [_seq(f'"{lo[0]}"', f"({_at_least(lo[1:])})")]
    if low <= high:
        alts.append(_seq(f"[{low}-{high}]", _free(rest)))
    if high != int(hi[0]):
        alts.append(_seq(f'"{hi[0]}"', f"({_at_most(hi[1:])})"))
    return _seq(prefix, "(" + " | ".join(alts) + ")")


def _non_negative(lo: int, hi: int | None) -> str:
    """Integers lo..hi (hi None: no upper bound), 0 <= lo, without leading zeros."""
    alts = []
    top = len(str(hi)) if hi is not None else MAX_DIGITS
    for digits in range(len(str(lo)), top + 1):
        first = max(lo, 10 ** (digits - 1) if digits > 1 else 0)
        last = min(hi, 10 ** digits - 1) if hi is not None else 10 ** digits - 1
        if first > last:
            continue
        if hi is None and digits > len(str(lo)):   # every longer number is in range
            alts.append(f"[1-9] [0-9]{{{digits - 1},{MAX_DIGITS - 1}}}")
            break
        alts.append(_same_length(str(first), str(last)))
    return " | ".join(f"({a})" for a in alts)


def _bound(schema: dict, key: str) -> float | int:
    value = schema[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"'{key}' must be a number")
    if isinstance(value, int):   # 10**400 is a valid JSON integer that no float holds
        return max(-LIMIT - 1, min(LIMIT + 1, value))
    if not math.isfinite(value):
        raise ValueError(f"'{key}' must be a number")
    return max(-LIMIT - 1.0, min(LIMIT + 1.0, value))


def integer_range(schema: dict) -> str | None:
    """GBNF (without trailing space) for the integers the schema's bounds allow; None if it has
    no bounds. Bounds are clamped to +-(10**MAX_DIGITS - 1). Raises ValueError for an empty range."""
    if not any(k in schema for k in BOUNDS):
        return None
    bounds = {k: _bound(schema, k) for k in BOUNDS if k in schema}
    lo = hi = None
    if "minimum" in bounds:
        lo = math.ceil(bounds["minimum"])
    if "exclusiveMinimum" in bounds:
        lo = max(lo if lo is not None else -LIMIT - 1, math.floor(bounds["exclusiveMinimum"]) + 1)
    if "maximum" in bounds:
        hi = math.floor(bounds["maximum"])
    if "exclusiveMaximum" in bounds:
        hi = min(hi if hi is not None else LIMIT + 1, math.ceil(bounds["exclusiveMaximum"]) - 1)
    if (lo is not None and hi is not None and lo > hi) or (lo is not None and lo > LIMIT) \
            or (hi is not None and hi < -LIMIT):
        raise ValueError(f"no integer of at most {MAX_DIGITS} digits lies between the bounds")
    lo = None if lo is None or lo < -LIMIT else int(lo)   # beyond the converter's reach: no bound
    hi = None if hi is None or hi > LIMIT else int(hi)
    alts = []
    if hi is None or hi >= 0:
        alts.append(_non_negative(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:   # negative: "-" then the absolute values
        low_abs = max(-hi, 1) if hi is not None else 1
        alts.append(f'"-" ({_non_negative(low_abs, -lo if lo is not None else None)})')
    return " | ".join(f"({a})" for a in alts)
