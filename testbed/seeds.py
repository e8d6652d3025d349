"""Several seeds per variant: one ``runs`` entry whose headline figures are medians.

Each variant runs once per seed (variants interleaved per seed, so slow drifts on a
shared machine touch every variant alike).  summary.json keeps the contract of one
``runs`` entry per variant: its numbers are the medians over the seeds, and
``seeds`` holds the per-seed entries as they were measured.
"""

from __future__ import annotations

import statistics
from typing import Any


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def median_entry(entries: list[Any]) -> Any:
    """Field-wise median of like-shaped entries (dicts recursively; numbers by median;
    anything else, e.g. names, from the first entry).  Missing/None values are skipped.

    >>> median_entry([{"a": 1, "b": {"c": 5.0}, "n": "x"},
    ...               {"a": 3, "b": {"c": None}, "n": "y"},
    ...               {"a": 2, "b": {"c": 7.0}, "n": "z"}])
    {'a': 2, 'b': {'c': 6.0}, 'n': 'x'}
    """
    present = [e for e in entries if e is not None]
    if not present:
        return None
    first = present[0]
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for e in present if isinstance(e, dict) for k in e))
        return {k: median_entry([e.get(k) for e in present if isinstance(e, dict)])
                for k in keys}
    if all(_is_number(e) for e in present):
        m = statistics.median(present)
        return int(m) if all(isinstance(e, int) for e in present) and m == int(m) else m
    return first


def combine_fidelity(per_seed: list[dict]) -> dict | None:
    """One verdict over the seeds: ok only if every seed was; each reason names its seed;
    stats are medians; ``flagged_seeds`` lists the seeds that were not ok (every seed's
    own verdict stays in its ``seeds`` entry).

    >>> v = combine_fidelity([{"seed": 1, "fidelity": {"ok": True, "reasons": [],
    ...                                                "samples": 10, "stats": {"x": 1}}},
    ...                       {"seed": 2, "fidelity": {"ok": False, "reasons": ["busy"],
    ...                                                "samples": 12, "stats": {"x": 3}}}])
    >>> v["ok"], v["reasons"], v["flagged_seeds"], v["samples"], v["stats"]
    (False, ['seed 2: busy'], [2], 22, {'x': 2})
    """
    verdicts = [(e.get("seed"), e["fidelity"]) for e in per_seed if e.get("fidelity")]
    if not verdicts:
        return None
    if len(verdicts) == 1:
        return verdicts[0][1]
    flagged = [seed for seed, v in verdicts if not v["ok"]]
    return {"ok": not flagged,
            "reasons": [f"seed {seed}: {r}" for seed, v in verdicts for r in v["reasons"]],
            "samples": sum(v["samples"] for _, v in verdicts),
            "thresholds": verdicts[0][1].get("thresholds"),
            "stats": median_entry([v.get("stats") for _, v in verdicts]),
            "flagged_seeds": flagged}


def combine(name: str, per_seed: list[dict]) -> dict:
    """The variant's ``runs`` entry: medians of ``fabric``, ``agents``, ``training`` and
    ``ecn`` over the seeds, the first seed's other fields (its folder is where the plots
    look), the fidelity verdicts combined (not ok if any seed was not), and ``seeds``:
    every per-seed entry."""
    entry = dict(per_seed[0])
    for key in ("fabric", "agents", "training", "ecn"):
        if key in entry:
            entry[key] = median_entry([e.get(key) for e in per_seed])
    if "fidelity" in entry:
        entry["fidelity"] = combine_fidelity(per_seed)
    entry["name"] = name
    entry["seeds"] = per_seed
    return entry
