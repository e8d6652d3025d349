"""Percentiles for latency summaries, shared by every generator.

Uses linear interpolation between closest ranks, the same definition as
``numpy.percentile`` with its default ``method="linear"``: for sorted values
``v[0..n-1]`` and ``q`` in [0, 100] the rank is ``r = q / 100 * (n - 1)`` and
the result is ``v[floor(r)] + (r - floor(r)) * (v[floor(r) + 1] - v[floor(r)])``.
Kept dependency-free so the generators run in bare host namespaces.

>>> percentiles([1, 2, 3, 4], [0, 50, 100])
[1.0, 2.5, 4.0]
>>> percentiles([1, 2, math.inf], [50, 75, 100])
[2.0, inf, inf]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentiles(values: Iterable[float], qs: Sequence[float]) -> list[float]:
    """Return the ``qs`` percentiles (0..100) of ``values`` by linear interpolation."""
    data = sorted(float(v) for v in values)
    if not data:
        raise ValueError("percentiles of an empty sequence")
    out = []
    last = len(data) - 1
    for q in qs:
        if not 0 <= q <= 100 or math.isnan(q):
            raise ValueError(f"percentile {q} is outside [0, 100]")
        rank = q / 100 * last
        low = math.floor(rank)
        lo, hi = data[low], data[min(low + 1, last)]
        # as written above; the guard keeps an infinite value (a failed chain) from
        # turning 0 * inf into NaN
        out.append(lo if rank == low or lo == hi else lo + (rank - low) * (hi - lo))
    return out


def summary(values: Sequence[float], qs: Sequence[float] = (50, 95, 99)) -> dict | None:
    """Return ``{"p50": .., ..., "max": ..}`` rounded to microseconds, or None if empty."""
    if not values:
        return None
    result = {f"p{q:g}": round(v, 3) for q, v in zip(qs, percentiles(values, qs), strict=True)}
    result["max"] = round(max(values), 3)
    return result
