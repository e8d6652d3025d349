"""Benchmark: the issue-3 targets, from full runs of the two scenarios.

- ``ecmp-vs-adaptive``: adaptive routing at least 1.25x ECMP's aggregate training
  goodput on the stride pattern (median over seeds); spray, random and the non-blocking
  reference are printed beside it.
- ``ecn-tuning``: ECN on (the tuned variant) cuts agent-chain p99 by at least 30% against
  ecn-off while training goodput stays within 10% (loses at most 10%: DCQCN that spares
  the queues may raise it, which the target does not count against it).

Each scenario runs as ``testbed run`` does (every variant once per seed, interleaved).
Needs root; takes several minutes; not run in CI.  An existing results folder can be
re-judged without running again (``--from DIR``).

    python -m bench.adaptive_bench [--duration 15] [--only stride|ecn] [--from DIR ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ADAPTIVE_TARGET = 1.25
P99_CUT_TARGET = 0.30
GOODPUT_TOLERANCE = 0.10


def _runs(summary: dict) -> dict[str, dict]:
    return {r["name"]: r for r in summary["runs"]}


def _goodput(run: dict | None) -> float | None:
    if not run or not run["training"].get("iterations"):
        return None
    return run["training"]["goodput_mbps"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _show(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def judge_adaptive(summary: dict) -> bool:
    """Print the goodput ratios; True if adaptive-stride reaches the target over ecmp."""
    runs = _runs(summary)
    ref = _goodput(next((r for r in summary["runs"] if r.get("reference")), None))
    print(f"{'variant':18} {'median Mb/s':>11} {'per seed':>24} {'x ecmp':>7} {'x ref':>6}")
    for run in summary["runs"]:
        base = runs.get(f"ecmp-{run.get('pattern')}")
        seeds = " ".join(_show(_goodput(s)) for s in run.get("seeds", []))
        print(f"{run['name']:18} {_show(_goodput(run)):>11} {seeds:>24} "
              f"{_show(_ratio(_goodput(run), _goodput(base))):>7} "
              f"{_show(_ratio(_goodput(run), ref)):>6}")
    ratio = _ratio(_goodput(runs.get("adaptive-stride")), _goodput(runs.get("ecmp-stride")))
    ok = ratio is not None and ratio >= ADAPTIVE_TARGET
    print(f"adaptive / ecmp goodput on stride: {_show(ratio)} "
          f"(target >= {ADAPTIVE_TARGET}) {'PASS' if ok else 'MISS'}")
    return ok


def judge_ecn(summary: dict) -> bool:
    """Print p99 and goodput against ecn-off; True if ecn-tuned meets both targets."""
    runs = _runs(summary)
    off = runs.get("ecn-off")
    if off is None:
        print("no ecn-off variant: cannot judge")
        return False
    p99_off, gp_off = off["agents"]["latency_ms"]["p99"], _goodput(off)
    verdict = False
    for name in ("ecn-off", "ecn-default", "ecn-tuned", "ecn-tuned-controller"):
        run = runs.get(name)
        if run is None:
            continue
        p99, gp = run["agents"]["latency_ms"]["p99"], _goodput(run)
        cut = 1 - p99 / p99_off if p99 is not None and p99_off else None
        change = _ratio(gp, gp_off)
        ok = (cut is not None and cut >= P99_CUT_TARGET and change is not None
              and change >= 1 - GOODPUT_TOLERANCE)
        seeds = " ".join(_show(s["agents"]["latency_ms"]["p99"]) for s in run.get("seeds", []))
        print(f"{name:20} chain p99 {_show(p99):>8} ms (seeds {seeds}), cut "
              f"{'-' if cut is None else f'{cut:.0%}'}; training {_show(gp)} Mb/s "
              f"({_show(change)}x ecn-off), CNPs {run['training'].get('cnps_received', 0)}"
              + ("" if name == "ecn-off" else f"  {'PASS' if ok else 'MISS'}"))
        if name == "ecn-tuned":
            verdict = ok
    print(f"ecn-tuned: p99 cut >= {P99_CUT_TARGET:.0%} with at most "
          f"{GOODPUT_TOLERANCE:.0%} less goodput: {'PASS' if verdict else 'MISS'}")
    return verdict


def run_scenario(name: str, duration: float | None, out: Path) -> dict:
    cmd = [sys.executable, "-m", "testbed.core.cli", "run", name, "--out", str(out)]
    if duration:
        cmd += ["--duration", f"{duration:g}"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return json.loads((out / "summary.json").read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, help="seconds of traffic per variant and seed")
    ap.add_argument("--only", choices=("stride", "ecn"))
    ap.add_argument("--from", dest="from_dirs", nargs="*", type=Path, default=[],
                    help="judge existing results folders instead of running")
    args = ap.parse_args(argv)
    judges = {"ecmp-vs-adaptive": judge_adaptive, "ecn-tuning": judge_ecn}
    if args.only:
        judges = {k: v for k, v in judges.items() if (k == "ecn-tuning") == (args.only == "ecn")}
    ok = True
    if args.from_dirs:
        for folder in args.from_dirs:
            if not (folder / "summary.json").is_file():
                print(f"--from: {folder} has no summary.json (a finished run's folder, "
                      "e.g. results/ecmp-vs-adaptive/TIMESTAMP)", file=sys.stderr)
                return 2
            summary = json.loads((folder / "summary.json").read_text())
            print(f"\n-- {summary['scenario']} ({folder})")
            ok &= judges[summary["scenario"]](summary)
        return 0 if ok else 1
    root = Path(tempfile.mkdtemp(prefix="tb-adaptive-bench-"))
    for name, judge in judges.items():
        print(f"\n-- {name}", flush=True)
        ok &= judge(run_scenario(name, args.duration, root / name))
    print(f"\nresults in {root}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
