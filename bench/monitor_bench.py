"""Benchmark: what watching a run live costs.

The default scenario runs twice side by side, plain and watched (``testbed run --monitor``:
the lab monitor beside every variant, the run's own Prometheus scraping it every second,
and the dashboard open in headless Chromium, following it once a second), in alternating
order when there are several rounds. Target: the watched run passes the fidelity monitor
in every variant (a flagged variant measured the host, not the lab). Reported: the CPU the
monitor, Prometheus and the browser took, each as a share of one core over the variant's
traffic, and the plain run's verdicts beside the watched one's.

Needs root, Debian's prometheus and a headless Chromium; takes a few minutes; not run in
CI. ``python -m bench.monitor_bench [--duration 20] [--rounds 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.core import layout
from testbed.monitor.browser import CHROMIUM, Browser

REPO = Path(__file__).resolve().parents[1]
HZ = os.sysconf("SC_CLK_TCK")


def session_cpu_s(sid: int) -> float:
    """CPU seconds of every process of session ``sid`` (the browser's), with what its
    leader collected from children that already ended."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) != sid:
            continue
        total += int(fields[11]) + int(fields[12])
        if int(stat.parent.name) == sid:
            total += int(fields[13]) + int(fields[14])
    return total / HZ


class Viewer:
    """Follows a run's progress lines and opens each variant's dashboard in a browser as
    soon as its monitor says where it is, keeping it open (the page polls once a second)
    until the next variant's."""

    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.cpu: dict[str, float] = {}  # variant: the browser's CPU share
        self.polls: dict[str, int] = {}
        self.browser: Browser | None = None
        self.variant, self.since, self.cpu0 = "", 0.0, 0.0

    def line(self, text: str) -> None:
        """One progress line: ``[1/3] agents-only: dashboard at URL, metrics at ...``."""
        if ": dashboard at " not in text:
            return
        self.close()
        tag, _, rest = text.partition(": dashboard at ")
        self.variant = tag.split("] ", 1)[-1].strip()
        self.browser = Browser(self.profile / self.variant)
        self.since, self.cpu0 = time.monotonic(), session_cpu_s(self.browser.proc.pid)
        self.browser.open(rest.split(",", 1)[0].strip())

    def close(self) -> None:
        browser = self.browser
        if browser is None:
            return
        try:
            self.polls[self.variant] = int(browser.evaluate(
                "window.testbedDashboard && testbedDashboard.polls") or 0)
        except Exception:  # noqa: BLE001 -- the count is a report, not the target
            self.polls[self.variant] = 0
        cpu = session_cpu_s(browser.proc.pid) - self.cpu0
        self.cpu[self.variant] = round(cpu / max(1e-6, time.monotonic() - self.since), 4)
        browser.close()
        self.browser = None


def run(scenario: str, duration: float, out: Path, watched: bool) -> tuple[dict, Viewer | None]:
    argv = [sys.executable, "-m", "testbed.core.cli", "run", scenario, "--duration",
            str(duration), "--out", str(out)] + (["--monitor"] if watched else [])
    viewer = Viewer(out.parent / f"{out.name}-browser") if watched else None
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    tail = []
    for text in proc.stdout:  # the runner's progress (stderr) and its table
        tail = (tail + [text])[-40:]
        if viewer is not None:
            viewer.line(text)
    proc.wait()
    if viewer is not None:
        viewer.close()
    if proc.returncode != 0:
        print("".join(tail))
        raise SystemExit(f"monitor bench: testbed run failed ({proc.returncode})")
    return json.loads((out / layout.SUMMARY).read_text()), viewer


def verdict(entry: dict) -> str:
    f = entry.get("fidelity") or {}
    return "ok" if f.get("ok", True) else "FLAGGED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.monitor_bench")
    parser.add_argument("--scenario", default="agents-vs-training")
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    if CHROMIUM is None:
        print("monitor bench: no headless Chromium (scripts/setup.sh --dev installs it)")
        return 1
    missed = False
    with tempfile.TemporaryDirectory(prefix="tb-monitor-bench-") as tmp:
        for rnd in range(args.rounds):
            order = (False, True) if rnd % 2 == 0 else (True, False)
            results = {}
            for watched in order:
                out = Path(tmp) / f"r{rnd}-{'watched' if watched else 'plain'}"
                results[watched] = run(args.scenario, args.duration, out, watched)
            (plain, _), (seen, viewer) = results[False], results[True]
            print(f"round {rnd + 1} ({'plain first' if order[0] is False else 'watched first'}"
                  f", {args.duration:g} s of traffic a variant): share of one core")
            print(f"  {'variant':16} {'plain':>8} {'watched':>8} {'monitor':>8} "
                  f"{'prometheus':>10} {'browser':>8} {'page polls':>10}")
            plain_runs = {r["name"]: r for r in plain["runs"]}
            for entry in seen["runs"]:
                name = entry["name"]
                cpu = entry.get("monitor", {}).get("cpu", {})
                watched_s = cpu.get("watched_s") or 1
                print(f"  {name:16} {verdict(plain_runs[name]):>8} {verdict(entry):>8} "
                      f"{cpu.get('monitor_s', 0) / watched_s:8.3f} "
                      f"{cpu.get('prometheus_s', 0) / watched_s:10.3f} "
                      f"{viewer.cpu.get(name, 0):8.3f} {viewer.polls.get(name, 0):>10}")
                if verdict(entry) != "ok":
                    missed = True
                    reasons = (entry.get("fidelity") or {}).get("reasons", [])
                    print(f"    watched {name} flagged: {'; '.join(reasons)[:300]}")
    print(f"target: every variant of the watched run passes the fidelity monitor: "
          f"{'MISSED' if missed else 'met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
