"""Benchmark: every shipped scenario runs clean, as shipped, on this machine.

Every scenario of ``scenarios/`` (fabric, backbone, MACsec and storage), every variant,
once per seed (the scenario's own seeds, or ``--seeds``), each a whole ``testbed run``
in a process of its own with the scenario's own duration: the claim is that the shipped
runs are clean, so nothing is shortened. Then one table, a row a scenario: its runs
(variants x seeds), how many the fidelity monitor flagged, the worst reason (the check
that failed in the largest share of its samples), the host's idle share in four samples
of five (20th percentile, the lowest variant: the monitor flags below 10 % in more than
one sample in five) and the busiest switch thread in four samples of five (80th
percentile, cores: flagged over 0.9). The target: no flagged run (a miss exits 1).

    python -m bench.clean_bench [--seeds 1,2,3] [--only NAME,...] [--out DIR] [--record]

``--record`` writes each scenario found clean into ``scenarios/checked.json`` (the host's
cores and datapath, its headroom, the seeds, the date; ``testbed scenarios`` shows it),
and removes the entry of a scenario flagged here whose entry claims a host no larger.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDLE_PCT = 0.2  # the host's idle share kept in four samples of five
THREAD_PCT = 0.8  # the busiest switch thread in four samples of five


@dataclass
class Row:
    """One scenario's runs: how many, how many flagged, why, and its headroom."""

    scenario: str
    runs: int = 0
    flagged: int = 0
    worst: str = ""
    worst_share: float = -1.0
    idle_p20: float | None = None
    thread_p80: float | None = None
    seeds: list[int] = field(default_factory=list)
    error: str = ""

    @property
    def clean(self) -> bool:
        return self.runs > 0 and self.flagged == 0 and not self.error


def _pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``, None without any.

    >>> _pct([0.5, 0.1, 0.3, 0.2, 0.4], 0.2), _pct([], 0.5)
    (0.1, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def short_reason(reason: str) -> tuple[str, float]:
    """A monitor's reason in a few words, and the share of samples it names (0-1).

    >>> short_reason("the host had less than 10 % idle CPU in 82 % of the samples (x)")
    ('host idle < 10 %, 82 % of samples', 0.82)
    >>> short_reason("ovs-vswitchd's forwarding thread used more than 0.9 of a core in "
    ...              "67 % of the samples: every switch's frames waited")
    ('switch thread > 0.9 core, 67 % of samples', 0.67)
    >>> short_reason("run failed: no space")
    ('run failed: no space', 1.0)
    """
    found = re.search(r"in (\d+(?:\.\d+)?) % of", reason)
    share = float(found.group(1)) / 100 if found else 1.0
    where = f", {found.group(1)} % of samples" if found else ""
    server = re.match(r"(server \S+): ", reason)
    prefix = f"{server.group(1)}: " if server else ""
    if "less than" in reason and "idle CPU" in reason:
        limit = re.search(r"less than (\d+(?:\.\d+)?) %", reason)
        return f"{prefix}host idle < {limit.group(1) if limit else '10'} %{where}", share
    if "forwarding thread" in reason:
        limit = re.search(r"more than (\d+(?:\.\d+)?) of a core", reason)
        return f"{prefix}switch thread > {limit.group(1) if limit else '0.9'} core{where}", share
    if reason.startswith("saturated links") or "saturated links" in reason:
        return f"{prefix}links < 90 % of what they owed{where}", share
    return reason[:60], share


def row_from(name: str, summary: dict, folder: Path) -> Row:
    """The table's row of one scenario's results folder (its summary and the variants'
    fidelity samples)."""
    row = Row(name, seeds=list(summary.get("seeds") or [summary.get("seed")]))
    idle_lows, thread_highs = [], []
    for run in summary.get("runs", []):
        for entry in run.get("seeds") or [run]:
            row.runs += 1
            verdict = entry.get("fidelity") or {}
            if not verdict.get("ok", False):
                row.flagged += 1
                for reason in verdict.get("reasons") or ["no fidelity verdict"]:
                    text, share = short_reason(reason)
                    if share > row.worst_share:
                        row.worst, row.worst_share = text, share
            samples_file = folder / entry.get("dir", "") / "fidelity.jsonl"
            samples = _judged(samples_file)
            idle = _pct([s["host_idle"] for s in samples if s.get("host_idle") is not None],
                        IDLE_PCT)
            thread = _pct([s["ovs_thread_cores"] for s in samples
                           if s.get("ovs_thread_cores") is not None], THREAD_PCT)
            if idle is not None:
                idle_lows.append(idle)
            if thread is not None:
                thread_highs.append(thread)
    row.idle_p20 = round(min(idle_lows), 3) if idle_lows else None
    row.thread_p80 = round(max(thread_highs), 3) if thread_highs else None
    return row


def _judged(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    inside = [s for s in samples if s.get("measuring")]
    return inside or samples


def table(rows: list[Row]) -> str:
    """The bench's table, a row a scenario.

    >>> print(table([Row("a", 3, 0, idle_p20=0.41, thread_p80=0.52),
    ...              Row("b", 4, 3, "switch thread > 0.9 core, 82 % of samples",
    ...                  0.82, 0.2, 0.97)]))
    scenario  runs  flagged  worst reason                               idle p20  thread p80
    --------  ----  -------  -----------------------------------------  --------  ----------
    a            3        0  -                                              41 %        0.52
    b            4        3  switch thread > 0.9 core, 82 % of samples      20 %        0.97
    """
    head = ("scenario", "runs", "flagged", "worst reason", "idle p20", "thread p80")
    body = [(r.scenario, str(r.runs), str(r.flagged),
             r.error or r.worst or "-",
             "-" if r.idle_p20 is None else f"{r.idle_p20 * 100:.0f} %",
             "-" if r.thread_p80 is None else f"{r.thread_p80:.2f}") for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    left = {0, 3}

    def fmt(cells) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *map(fmt, body)])


def exit_status(rows: list[Row]) -> int:
    """0 when every scenario ran and none of its runs was flagged, else 1.

    >>> exit_status([Row("a", 3, 0)]), exit_status([Row("a", 3, 0), Row("b", 2, 1)])
    (0, 1)
    >>> exit_status([Row("c", 0, 0, error="run failed")]), exit_status([])
    (1, 1)
    """
    return 0 if rows and all(r.clean for r in rows) else 1


def entry_for(row: Row, *, cores: int, datapath: str, machine: str) -> dict:
    """The ``scenarios/checked.json`` entry of a clean row (:mod:`testbed.core.checked`)."""
    out = {"cores": cores, "datapath": datapath, "seeds": row.seeds, "variants": row.runs,
           "date": time.strftime("%Y-%m-%d"), "machine": machine}
    if row.idle_p20 is not None:
        out["cpu_headroom"] = row.idle_p20
    if row.thread_p80 is not None:
        out["busiest_thread_cores"] = row.thread_p80
    return out


def record(rows: list[Row], *, cores: int, datapath: str, machine: str,
           path: Path | None = None) -> list[str]:
    """Write the clean rows' entries; drop a flagged scenario's entry that claims a host
    no larger than this one (it is contradicted). Returns what it did, a line each."""
    from testbed.core import checked

    path = path or checked.CHECKED_FILE
    known = checked.load(path)
    done = []
    for row in rows:
        if row.clean:
            checked.record(row.scenario, entry_for(row, cores=cores, datapath=datapath,
                                                   machine=machine), path)
            done.append(f"{row.scenario}: checked clean on {cores} cores, {datapath}")
        elif checked.covers(known.get(row.scenario), cores, datapath):
            checked.record(row.scenario, None, path)
            done.append(f"{row.scenario}: flagged here; its entry (a host no larger) removed")
    return done


def run_scenario(path: Path, out: Path, seeds: str | None) -> Row:
    """One whole ``testbed run`` of the scenario, as shipped, into ``out``."""
    cmd = [sys.executable, "-m", "testbed.core.cli", "run", str(path), "--out", str(out)]
    if seeds:
        cmd += ["--seeds", seeds]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    summary_file = out / "summary.json"
    if done.returncode or not summary_file.is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return Row(path.stem, error=f"run failed ({done.returncode}): {last[0][:80]}")
    return row_from(path.stem, json.loads(summary_file.read_text()), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.clean_bench")
    ap.add_argument("--seeds", help="comma-separated seeds for every scenario (default: "
                                    "each scenario's own)")
    ap.add_argument("--only", help="these scenarios only, comma-separated names")
    ap.add_argument("--out", type=Path, help="results root (default: "
                                             "results/bench-clean/TIMESTAMP)")
    ap.add_argument("--record", action="store_true",
                    help="write the clean scenarios into scenarios/checked.json")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("clean_bench: needs root (it runs every scenario)", file=sys.stderr)
        return 2
    from testbed.cluster.fit import host_datapath, usable_cores
    from testbed.host.capabilities import machine

    paths = sorted((ROOT / "scenarios").glob("*.yaml"))
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {p.stem for p in paths}
        if unknown:
            print(f"clean_bench: --only: no scenario {', '.join(sorted(unknown))}",
                  file=sys.stderr)
            return 2
        paths = [p for p in paths if p.stem in wanted]
    root = args.out or ROOT / "results" / "bench-clean" / time.strftime("%Y%m%d-%H%M%S")
    print(f"every scenario as shipped on {machine()}; results in {root}", flush=True)
    rows = []
    for path in paths:
        started = time.monotonic()
        row = run_scenario(path, root / path.stem, args.seeds)
        rows.append(row)
        print(f"  {row.scenario}: {row.runs} runs, {row.flagged} flagged"
              f"{'; ' + (row.error or row.worst) if not row.clean else ''} "
              f"({time.monotonic() - started:.0f} s)", flush=True)
    print(table(rows))
    if args.record:
        cores = int(usable_cores())
        for line in record(rows, cores=cores, datapath=host_datapath(), machine=machine()):
            print(f"  recorded: {line}")
    status = exit_status(rows)
    flagged = sum(r.flagged for r in rows)
    print(f"  {'met   ' if status == 0 else 'MISSED'} no flagged run: {flagged} flagged of "
          f"{sum(r.runs for r in rows)}"
          + (f", {sum(1 for r in rows if r.error)} scenarios did not run"
             if any(r.error for r in rows) else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
