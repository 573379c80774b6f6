"""GBNF for integers within bounds: JSON schema's minimum / maximum / exclusive* on integers.

A grammar cannot compare numbers, but the decimal strings of a range of integers form a
regular language: split the range by digit count, and within one digit count by the first
digit where the bounds differ (the classic regex-for-a-numeric-range construction).
"""
from __future__ import annotations

import math

MAX_DIGITS = 16        # the converter's own integers have at most 16 digits
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")   # the schema keys enforced here


def _same_length(lo: str, hi: str) -> str:
    """Decimal strings of equal length from lo to hi (lo <= hi), as a GBNF expression."""
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    if lo[0] == hi[0]:
        return f'"{lo[0]}" ({_same_length(lo[1:], hi[1:])})'
    rest = len(lo) - 1
    alts = [f'"{lo[0]}" ({_same_length(lo[1:], "9" * rest)})']
    if int(hi[0]) - int(lo[0]) > 1:
        alts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}] [0-9]{{{rest}}}")
    alts.append(f'"{hi[0]}" ({_same_length("0" * rest, hi[1:])})')
    return " | ".join(alts)


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


def integer_range(schema: dict) -> str | None:
    """GBNF (without trailing space) for the integers the schema's bounds allow; None if it has
    no bounds. Raises ValueError for an empty range."""
    if not any(k in schema for k in BOUNDS):
        return None
    for k in BOUNDS:
        if k in schema and (isinstance(schema[k], bool) or not isinstance(schema[k], (int, float))
                            or not math.isfinite(schema[k])):
            raise ValueError(f"'{k}' must be a number")
    lo = hi = None
    if "minimum" in schema:
        lo = math.ceil(schema["minimum"])
    if "exclusiveMinimum" in schema:
        lo = max(lo if lo is not None else -math.inf, math.floor(schema["exclusiveMinimum"]) + 1)
    if "maximum" in schema:
        hi = math.floor(schema["maximum"])
    if "exclusiveMaximum" in schema:
        hi = min(hi if hi is not None else math.inf, math.ceil(schema["exclusiveMaximum"]) - 1)
    lo = None if lo is None else int(lo)
    hi = None if hi is None else int(hi)
    limit = 10 ** MAX_DIGITS - 1
    if (lo is not None and hi is not None and lo > hi) or (lo is not None and lo > limit) \
            or (hi is not None and hi < -limit):
        raise ValueError(f"no integer of at most {MAX_DIGITS} digits lies between the bounds")
    alts = []
    if hi is None or hi >= 0:
        alts.append(_non_negative(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:   # negative: "-" then the absolute values
        low_abs = max(-hi, 1) if hi is not None else 1
        alts.append(f'"-" ({_non_negative(low_abs, -lo if lo is not None else None)})')
    return " | ".join(f"({a})" for a in alts)
