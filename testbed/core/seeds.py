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
    anything else, e.g. names, from the first entry).

    A value that some entries have and others lack (absent or None) has no median: the
    result is None there, and :func:`missing_values` says which seeds lacked it. Counting
    the missing ones as the worst value instead would need a direction for every field
    (higher latency is worse, higher goodput better) and would still report a number that
    no seed measured; skipping them would flatter the variant, since a value goes
    missing when the measurement failed (every chain of the seed failed, so it has no
    latency). None cannot flatter, and ``seeds`` keeps what each seed measured.

    >>> median_entry([{"a": 1, "b": {"c": 5.0}, "n": "x"},
    ...               {"a": 3, "b": {"c": 6.0}, "n": "y"},
    ...               {"a": 2, "b": {"c": 7.0}, "n": "z"}])
    {'a': 2, 'b': {'c': 6.0}, 'n': 'x'}
    >>> median_entry([{"p99": 5.0}, {"p99": None}, {"p99": 7.0}])
    {'p99': None}
    """
    present = [e for e in entries if e is not None]
    if not present or len(present) < len(entries):
        return None
    first = present[0]
    if isinstance(first, dict):
        if not all(isinstance(e, dict) for e in present):
            return None
        keys = list(dict.fromkeys(k for e in present for k in e))
        return {k: median_entry([e.get(k) for e in present]) for k in keys}
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


def missing_values(entries: list[Any], seeds: list[Any], path: str = "") -> dict[str, list]:
    """Where some seeds lack a value that others have: ``{"a.b": [seeds lacking it]}``.

    >>> missing_values([{"lat": {"p99": 5.0}}, {"lat": None}, {"lat": {"p99": None}}],
    ...                [1, 2, 3], "agents")
    {'agents.lat': [2], 'agents.lat.p99': [3]}
    """
    pairs = list(zip(entries, seeds, strict=True))
    lacking = [s for e, s in pairs if e is None]
    have = [(e, s) for e, s in pairs if e is not None]
    out: dict[str, list] = {}
    if lacking and have:
        out[path] = lacking
    dicts = [(e, s) for e, s in have if isinstance(e, dict)]
    if dicts:
        keys = list(dict.fromkeys(k for e, _ in dicts for k in e))
        for k in keys:
            out.update(missing_values([e.get(k) for e, _ in dicts], [s for _, s in dicts],
                                      f"{path}.{k}" if path else str(k)))
    return out


def combine(name: str, per_seed: list[dict]) -> dict:
    """The variant's ``runs`` entry: medians of ``fabric``, ``agents``, ``training`` and
    ``ecn`` over the seeds, the first seed's other fields (its folder is where the plots
    look), the fidelity verdicts combined (not ok if any seed was not), ``seeds``: every
    per-seed entry, and, when a seed lacked a value the others have, ``missing``:
    ``{field: [seeds]}`` (that field's median is None)."""
    entry = dict(per_seed[0])
    seeds = [e.get("seed", i) for i, e in enumerate(per_seed)]
    missing: dict[str, list] = {}
    for key in ("fabric", "agents", "training", "ecn", "elephants"):
        if key in entry:
            values = [e.get(key) for e in per_seed]
            entry[key] = median_entry(values)
            missing.update(missing_values(values, seeds, key))
    if "fidelity" in entry:
        entry["fidelity"] = combine_fidelity(per_seed)
    entry["name"] = name
    if missing:
        entry["missing"] = missing
    entry["seeds"] = per_seed
    return entry
