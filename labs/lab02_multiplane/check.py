"""Lab 2 checks: multi-plane scaling (``testbed check 2 FOLDER``, FOLDER holds answers.yaml).

The student's arithmetic is compared with the project's own calculator
(:func:`topologies.calculator.calculate`, the code behind ``testbed calc``), run on the
inputs the answers file states; nothing here knows the answers.
"""

from __future__ import annotations

from pathlib import Path

from testbed.core.scenario import read as read_yaml
from testbed.reports.grading import Missing, Results, Verdict, failed, passed
from topologies.calculator import calculate
from topologies.spec import TopologyError

NEEDS = "answers.yaml"
NEEDS_HINT = "copy labs/lab02_multiplane/starter/answers.yaml there and fill it in"
LANE_SPLITS = (1, 2, 4, 8)  # a 1,600 Gb/s GPU over ports of whole 200 Gb/s lanes


def read(path: Path) -> dict:
    """answers.yaml through the scenario files' bounded YAML loader (size, aliases, depth)."""
    data = read_yaml(path)
    return data if isinstance(data, dict) else {}


def _part(r: Results, name: str) -> dict:
    part = r.summary.get(name)
    if not isinstance(part, dict):
        raise Missing(f"answers.yaml has no {name} section")
    return part


def _answer(part: dict, section: str, key: str):
    value = part.get(key)
    if value is None or value == "TODO":
        raise Missing(f"{section}.{key} is not answered (still TODO)")
    return value


def _compare(section: str, part: dict, expected: dict) -> Verdict:
    wrong, answered = [], 0
    for key, want in expected.items():
        got = _answer(part, section, key)
        answered += 1
        try:
            ok = float(got) == float(want)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            wrong.append(f"{key} {got!r}")
    if wrong:
        return failed(f"{section}: {len(wrong)} of {answered} not what the calculator gives: "
                      + ", ".join(wrong) + " (recompute with the guide's formulas)")
    return passed(f"{section}: all {answered} right")


def _inputs(part: dict, section: str) -> dict:
    try:
        return calculate(switch_tbps=float(_answer(part, section, "switch_tbps")),
                         gpu_gbps=float(_answer(part, section, "gpu_gbps")),
                         planes=int(_answer(part, section, "planes")))
    except (TopologyError, ValueError) as exc:
        raise Missing(f"{section}: the calculator refuses these inputs: {exc}") from None


def two_tier_radix_and_reach(r: Results) -> Verdict:
    """Part A: radix and reach of one plane and of four planes, two tiers."""
    part = _part(r, "part_a")
    c = _inputs(part, "part_a")
    return _compare("part_a", part, {
        "single_plane_radix": c["single_plane"]["radix"],
        "multi_plane_radix": c["multi_plane"]["radix"],
        "single_plane_max_gpus": c["single_plane_max_gpus"],
        "multi_plane_max_gpus": c["max_gpus"], "reach_ratio": c["reach_ratio"]})


def third_tier(r: Results) -> Verdict:
    """Part A: the single plane grown by a third tier (k-ary fat-tree) instead."""
    part = _part(r, "part_a")
    t = _inputs(part, "part_a")["single_plane_three_tier"]
    return _compare("part_a", part, {"three_tier_max_gpus": t["max_gpus"],
                                     "three_tier_switches": t["switches"],
                                     "three_tier_switch_hops": t["switch_hops"]})


def planes_or_third_tier(r: Results) -> Verdict:
    """Part A: which design reaches more GPUs with these switches."""
    part = _part(r, "part_a")
    c = _inputs(part, "part_a")
    want = "planes" if c["multi_plane_vs_three_tier"] > 1 else "third-tier"
    got = str(_answer(part, "part_a", "more_gpus")).strip().lower()
    if got not in ("planes", "third-tier"):
        return failed(f"part_a.more_gpus {got!r}: answer planes or third-tier")
    if got != want:
        return failed(f"part_a.more_gpus {got!r}: compare multi_plane_max_gpus with "
                      "three_tier_max_gpus")
    return passed(f"more_gpus {got!r}: {c['max_gpus']:,} GPUs in {c['planes']} planes "
                  f"(3 switch hops) against {c['single_plane_three_tier']['max_gpus']:,} in "
                  "one three-tier plane (5 hops)")


def fewest_planes(r: Results) -> Verdict:
    """Part B: the fewest planes (1, 2, 4, 8) that reach the target in two tiers."""
    part = _part(r, "part_b")
    target = int(_answer(part, "part_b", "target_gpus"))
    planes = int(_answer(part, "part_b", "planes"))
    if planes not in LANE_SPLITS:
        return failed(f"part_b: {planes} planes would need ports of {1600 / planes:g} Gb/s, "
                      "not a whole number of 200 Gb/s lanes (1, 2, 4 or 8)")
    c = _inputs(part, "part_b")
    if c["max_gpus"] < target:
        return failed(f"part_b: {planes} planes reach {c['max_gpus']:,} GPUs, short of "
                      f"{target:,}")
    fewer = [p for p in LANE_SPLITS if p < planes
             and _inputs({**part, "planes": p}, "part_b")["max_gpus"] >= target]
    if fewer:
        return failed(f"part_b: {fewer[0]} planes already reach {target:,} GPUs")
    return _compare("part_b", part, {"max_gpus": c["max_gpus"],
                                     "switches": c["multi_plane"]["switches"]})


CHECKS = [two_tier_radix_and_reach, third_tier, planes_or_third_tier, fewest_planes]
