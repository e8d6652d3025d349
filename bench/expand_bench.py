"""Benchmark: a rack added to a running fabric under load.

Runs ``scenarios/rack-expansion.yaml`` (agent chains and a training ring on a one-plane
leaf-spine of eight nodes; at 4 s a rack of a leaf and four nodes is cabled in, accepted
on its own, then routed; its ``faulty-rack`` variant's rack has a port losing 2 %) over
the seeds given, and checks the targets set before the first run:

- the old fabric loses nothing: 0 of the UDP probes sent across it while the rack was
  added (and 0 chains failed);
- the rack carries traffic within 5 s of its verdict (each accepted node reaches the old
  fabric on every plane);
- the rack's acceptance finds the planted fault and excludes nothing else.

A variant the fidelity monitor flagged measured the host, not the lab: the bench says so
and fails. Beside them it prints the steady variant's chain p99 and training rate (the
same workloads, no rack added). Needs root; about 100 s a seed; not run in CI.
``python -m bench.expand_bench [--seeds 1,2,3]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "rack-expansion.yaml"
TRAFFIC_AFTER_S = 5.0


def check(summary: dict) -> tuple[list[str], list[str]]:
    """The table's lines and the targets missed (with why)."""
    lines = [f"{'variant':<12} {'seed':>4}  {'old fabric lost':>16}  {'chains failed':>13}  "
             f"{'traffic after':>13}  {'rack':<32} fidelity"]
    missed = []
    for run in summary["runs"]:
        for one in run.get("seeds") or [run]:
            seed = one.get("seed", run.get("seed"))
            fidelity = one.get("fidelity") or {}
            verdict = "ok" if fidelity.get("ok") else "flagged: " + "; ".join(
                fidelity.get("reasons") or ["no verdict"])
            agents = one.get("agents") or {}
            failed = agents.get("chains_failed", 0)
            grown = one.get("expansion")
            if grown is None:
                lines.append(f"{run['name']:<12} {seed:>4}  {'-':>16}  {failed:>13}  "
                             f"{'-':>13}  {'(no rack)':<32} {verdict}")
                if verdict != "ok":
                    missed.append(f"{run['name']} seed {seed}: flagged by the fidelity "
                                  f"monitor ({verdict}): the host, not the lab, was measured")
                continue
            old = grown["old_fabric"]
            after = (grown.get("routed") or {}).get("traffic_after_s")
            acc = grown["acceptance"]
            score = grown.get("score")
            rack = ("accepted" if acc["accepted"] else
                    "excluded " + ", ".join(acc["excluded_links"] + acc["excluded_nodes"]))
            lines.append(f"{run['name']:<12} {seed:>4}  {old['lost']:>6} of {old['sent']:<7}  "
                         f"{failed:>13}  {after if after is not None else '-':>11} s  "
                         f"{rack:<32} {verdict}")
            where = f"{run['name']} seed {seed}"
            if verdict != "ok":
                missed.append(f"{where}: flagged by the fidelity monitor ({verdict}): the "
                              "host, not the lab, was measured")
            if old["lost"] or failed:
                missed.append(f"{where}: the old fabric lost {old['lost']} probes, "
                              f"{failed} chains failed")
            if after is None or after > TRAFFIC_AFTER_S:
                missed.append(f"{where}: the rack carried traffic {after} s after its "
                              f"verdict (target {TRAFFIC_AFTER_S:g} s)")
            if score and (score["missed"] or score["extra"]):
                missed.append(f"{where}: planted fault missed {score['missed']}, "
                              f"excluded beyond it {score['extra']}")
            if not score and not acc["accepted"]:
                missed.append(f"{where}: a healthy rack was not accepted: {rack}")
    return lines, missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.expand_bench")
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="expand-bench-")) / "run"  # kept: the report
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run", str(SCENARIO),
                           "--seeds", args.seeds, "--out", str(out)], cwd=REPO)
    if done.returncode != 0:
        print(f"expand bench: testbed run failed ({done.returncode})")
        return 1
    summary = json.loads((out / "summary.json").read_text())
    print(f"results: {out}")
    lines, missed = check(summary)
    print("\n".join(lines))
    for m in missed:
        print(f"MISSED: {m}")
    print("expand bench: " + ("every target met" if not missed else
                              f"{len(missed)} target(s) missed"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
