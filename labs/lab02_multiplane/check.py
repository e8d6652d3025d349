"""Lab 2 checks: multi-plane scaling (``testbed check 2 FOLDER``, FOLDER holds answers.yaml).

The student's arithmetic is compared with the project's own calculator
(:func:`topologies.calculator.calculate`, the code behind ``testbed calc``), run on the
inputs the answers file states; nothing here knows the answers. Graded with
``--student ID``, the inputs are the id's (``testbed start 2 --student ID`` wrote them
into the student's copy), whatever the file states.

>>> from testbed.reports.students import Draw
>>> p = student_params(Draw(2, "ada"))
>>> sorted(p), p == student_params(Draw(2, "ada"))
(['part_a', 'part_b'], True)
>>> calculate(**p["part_a"])["multi_plane_vs_three_tier"] != 1
True
"""

from __future__ import annotations

import math
from pathlib import Path

from testbed.core.scenario import read as read_yaml
from testbed.reports.grading import Missing, Results, Verdict, failed, passed
from testbed.reports.students import Draw, substitute
from topologies.calculator import calculate
from topologies.spec import TopologyError

NEEDS = "answers.yaml"
NEEDS_HINT = "copy labs/lab02_multiplane/starter/answers.yaml there and fill it in"
LANE_SPLITS = (1, 2, 4, 8)  # a 1,600 Gb/s GPU over ports of whole 200 Gb/s lanes
LANE_GBPS = 200


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
    """Part B: the fewest planes (1, 2, 4, 8) that reach the target in two tiers, what
    they reach, their switches, and the leaves the target's GPUs alone fill."""
    part = _part(r, "part_b")
    target = int(_answer(part, "part_b", "target_gpus"))
    planes = int(_answer(part, "part_b", "planes"))
    gpu = float(_answer(part, "part_b", "gpu_gbps"))
    splits = [p for p in LANE_SPLITS if gpu / p >= LANE_GBPS]  # 800 Gb/s: 1, 2 or 4
    if planes not in splits:
        return failed(f"part_b: {planes} planes would need ports of {gpu / planes:g} Gb/s, "
                      f"not a whole number of {LANE_GBPS} Gb/s lanes ("
                      f"{', '.join(map(str, splits[:-1]))} or {splits[-1]})")
    c = _inputs(part, "part_b")
    if c["max_gpus"] < target:
        return failed(f"part_b: {planes} planes reach {c['max_gpus']:,} GPUs, short of "
                      f"{target:,}")
    fewer = [p for p in splits if p < planes
             and _inputs({**part, "planes": p}, "part_b")["max_gpus"] >= target]
    if fewer:
        return failed(f"part_b: {fewer[0]} planes already reach {target:,} GPUs")
    per_leaf = c["multi_plane"]["radix"] // 2  # GPUs a leaf of a plane takes
    return _compare("part_b", part, {"max_gpus": c["max_gpus"],
                                     "switches": c["multi_plane"]["switches"],
                                     "leaves_needed": planes * math.ceil(target / per_leaf)})


CHECKS = [two_tier_radix_and_reach, third_tier, planes_or_third_tier, fewest_planes]


# --- per-student variants (testbed start 2 --student ID) --------------------------------

#: part A's designs a student may get: switch capacity (Tb/s), GPU bandwidth (Gb/s) and
#: planes, each a design the calculator accepts (ports of at least one 200 Gb/s lane, a
#: single-plane radix of 16 or more) where planes and a third tier do not tie; neither
#: the starter's 51.2/800/4 (its solution is in the repository) nor the guide's
#: 102.4/1600/8 (its `testbed calc` line prints that answer)
PART_A = [(t, g, p) for t in (12.8, 25.6, 51.2, 102.4) for g in (400, 800, 1600)
          for p in (2, 4, 8)
          if (t, g, p) not in ((51.2, 800, 4), (102.4, 1600, 8)) and g / p >= 200
          and t * 1000 / g >= 16
          and calculate(switch_tbps=t, gpu_gbps=g, planes=p)["multi_plane_vs_three_tier"] != 1]
#: part B's designs: switch (Tb/s), GPU (Gb/s) and the fewest planes the target asks
#: for: 2 or more, whole 200 Gb/s lanes a port, a single-plane radix of 16 or more;
#: not the two the guide's `testbed calc` lines print (102.4/1600/8, 51.2/800/4)
PART_B = [(t, g, p) for t in (25.6, 51.2, 102.4) for g in (800, 1600) for p in (2, 4, 8)
          if g / p >= LANE_GBPS and t * 1000 / g >= 16
          and (t, g, p) not in ((102.4, 1600, 8), (51.2, 800, 4))]


def _reach(switch_tbps: float, gpu_gbps: int, planes: int) -> int:
    return calculate(switch_tbps=switch_tbps, gpu_gbps=gpu_gbps, planes=planes)["max_gpus"]


def student_params(draw: Draw) -> dict:
    """A student's inputs: a part A design from :data:`PART_A`; for part B a switch, a
    GPU and a target (a multiple of 100 GPUs) that the planes of a :data:`PART_B` design
    are the fewest to reach."""
    t, g, p = draw.pick("part_a", PART_A)
    switch, gpu, planes = draw.pick("part_b", PART_B)
    low = _reach(switch, gpu, planes // 2) // 100 + 1  # more than half the planes reach
    high = _reach(switch, gpu, planes) // 100
    target = 100 * draw.between("part_b.target_gpus", low, high)
    return {"part_a": {"switch_tbps": t, "gpu_gbps": g, "planes": p},
            "part_b": {"switch_tbps": switch, "gpu_gbps": gpu, "target_gpus": target}}


def _n(value: float) -> str:
    return f"{value:g}"


def personalize(folder: Path, params: dict) -> None:
    """Write a student's inputs into their copy of answers.yaml (the comments too)."""
    path = folder / NEEDS
    head, sep, tail = path.read_text().partition("\npart_b:")
    a, b = params["part_a"], params["part_b"]
    where = str(path)
    head = substitute(head, r"^# Part A: .*$", f"# Part A: a {_n(a['switch_tbps'])} Tb/s "
                      f"switch, {a['gpu_gbps']:,} Gb/s per GPU, split over {a['planes']} "
                      "planes.", where)
    for key in ("switch_tbps", "gpu_gbps", "planes"):
        head = substitute(head, rf"^  {key}: .*$", f"  {key}: {_n(a[key])}", where)
    head = substitute(head, r"# ports of \d+ Gb/s \(an even number\)$",
                      f"# ports of {_n(a['gpu_gbps'])} Gb/s (an even number)", where)
    head = substitute(head, r"# ports of \d+/\d+ Gb/s$",
                      f"# ports of {_n(a['gpu_gbps'])}/{a['planes']} Gb/s", where)
    head = substitute(head, r"# two tiers, non-blocking, \d+ planes$",
                      f"# two tiers, non-blocking, {a['planes']} planes", where)
    lanes = int(b["switch_tbps"] * 1000 // 200)
    head = substitute(head, r"^# Part B: .*$", f"# Part B: a design. {_n(b['switch_tbps'])} "
                      f"Tb/s switches ({lanes} lanes of 200 Gb/s), {b['gpu_gbps']:,} Gb/s "
                      "per GPU.", where)
    splits = [str(p) for p in LANE_SPLITS if b["gpu_gbps"] / p >= LANE_GBPS]
    head = substitute(head, r"^# A port is a whole number of lanes, so a GPU's .*$",
                      f"# A port is a whole number of lanes, so a GPU's {b['gpu_gbps']:,} "
                      f"Gb/s splits over {', '.join(splits[:-1])} or {splits[-1]}", where)
    head = substitute(head, r"reaches [\d,]+ GPUs:$", f"reaches {b['target_gpus']:,} GPUs:",
                      where)
    for key in ("switch_tbps", "gpu_gbps", "target_gpus"):
        tail = substitute(tail, rf"^  {key}: .*$", f"  {key}: {_n(b[key])}", where)
    path.write_text(head + sep + tail)


def _float(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def student_stated(r: Results) -> dict:
    """The inputs the answers file states, in :func:`student_params`'s shape (None where a
    part or an input is missing or not a number)."""
    out = {}
    for part, keys in (("part_a", ("switch_tbps", "gpu_gbps", "planes")),
                       ("part_b", ("switch_tbps", "gpu_gbps", "target_gpus"))):
        section = r.summary.get(part)
        if not isinstance(section, dict):
            out[part] = None
            continue
        out[part] = {k: _float(section.get(k)) for k in keys}
    return out


def student_inputs(answers: dict, params: dict) -> dict:
    """The answers with the student's inputs in place of what the file states: the checks
    then compute what the id's design gives."""
    out = dict(answers)
    for part in ("part_a", "part_b"):
        section = out.get(part)
        out[part] = {**(section if isinstance(section, dict) else {}), **params[part]}
    return out
