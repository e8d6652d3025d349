"""Numbers read from a command line: finite, bounded, their text bounded before it is
converted, each problem one line naming the flag (exit status 2).

Python's ``float("inf")`` and ``float("nan")`` succeed, and ``int()`` of more than
4,300 digits raises a ValueError that names no flag; every numeric flag of the lab's
commands is read through :func:`flag` instead.

>>> number("2.5", "--loss", 0, 1)
Traceback (most recent call last):
...
testbed.errors.ConfigError: --loss: must be a number 0..1, got '2.5'
>>> number("inf", "--switch-tbps", 0, 10_000)
Traceback (most recent call last):
...
testbed.errors.ConfigError: --switch-tbps: must be a finite number 0..10000, got 'inf'
>>> number("8", "--planes", 1, 1024, integer=True), number(" 0.25 ", "--loss", 0, 1)
(8, 0.25)
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from testbed.errors import ConfigError

#: characters of a number's text (a float of 40 digits says all a float can hold)
MAX_CHARS = 40
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")  # ASCII digits, within 64 bits' 19


def number(text: str | int | float, field: str, low: float, high: float, *,
           integer: bool = False) -> int | float:
    """``text`` as a finite number within ``low``..``high`` (an integer of at most 19
    digits when ``integer``); ConfigError naming ``field`` otherwise."""
    kind = "an integer" if integer else "a number"
    span = f"{_shown(low)}..{_shown(high)}"
    if isinstance(text, str):
        shown = repr(text[:MAX_CHARS]) + ("..." if len(text) > MAX_CHARS else "")
    elif isinstance(text, int) and abs(text) >= 10 ** MAX_CHARS:  # repr() may refuse it
        shown = f"an integer of {text.bit_length()} bits"
    else:
        shown = repr(text)
    if isinstance(text, bool):
        raise ConfigError(field, f"must be {kind} {span}, got {shown}")
    if isinstance(text, str):
        word = text.strip()
        if integer:
            value: int | float | None = int(word) if _INTEGER.fullmatch(word) else None
        else:
            try:
                value = float(word) if len(word) <= MAX_CHARS and word.isascii() else None
            except ValueError:
                value = None
        if value is None:
            raise ConfigError(field, f"must be {kind} {span}, got {shown}")
    elif isinstance(text, int) or (not integer and isinstance(text, float)):
        value = text
    else:
        raise ConfigError(field, f"must be {kind} {span}, got {shown}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(field, f"must be a finite number {span}, got {shown}")
    if not low <= value <= high:
        raise ConfigError(field, f"must be {kind} {span}, got {shown}")
    return value


def _shown(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def flag(low: float, high: float, *, integer: bool = False) -> Callable[[str], int | float]:
    """An argparse ``type=``: the flag's text read by :func:`number` (argparse names the
    flag; the lab's command line prints its error as one line).

    >>> parser = argparse.ArgumentParser(exit_on_error=False)
    >>> _ = parser.add_argument("--count", type=flag(1, 100, integer=True))
    >>> parser.parse_args(["--count", "3"]).count
    3
    >>> parser.parse_args(["--count", "1e3"])
    Traceback (most recent call last):
    ...
    argparse.ArgumentError: argument --count: must be an integer 1..100, got '1e3'
    """
    def convert(text: str) -> int | float:
        try:
            return number(text, "", low, high, integer=integer)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.reason) from None

    convert.__name__ = "integer" if integer else "number"
    return convert
