"""What one lab run needs of a machine: run a command (a ``testbed run``) and sample the
whole host while it runs.

    python scripts/sizing.py --out results/lab03 --json sizing.json -- \\
        .venv/bin/testbed run labs/lab03_hashing/starter/scenario.yaml --out results/lab03

Every 0.5 s it reads ``/proc/meminfo`` (memory in use: MemTotal - MemAvailable) and
``/proc/stat`` (busy CPU, iowait counted as idle, as the fidelity monitor counts it).
It prints the wall time, the memory in use before the run and its peak above that, the
busy cores (mean and 95th percentile of the samples), and the size of the results folder
given with ``--out``. The figures are the host's, not the run's alone: run it with nothing
else busy. The command's exit status is passed on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.host.procs import parse_cpu_times  # noqa: E402
from traffic.stats import percentiles  # noqa: E402

INTERVAL_S = 0.5


def mem_used_mb() -> float:
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    return (fields["MemTotal"] - fields["MemAvailable"]) / 1024


def cpu_ticks() -> tuple[int, int, int]:
    """(total, idle incl. iowait, number of CPUs) of ``/proc/stat``, as the fidelity
    monitor reads it."""
    times = parse_cpu_times(Path("/proc/stat").read_text())
    return times.total, times.idle, times.cpus


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


class Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.memory: list[float] = []
        self.busy: list[float] = []

    def run(self) -> None:
        total, idle, cpus = cpu_ticks()
        while not self.stop.wait(INTERVAL_S):
            self.memory.append(mem_used_mb())
            t, i, _ = cpu_ticks()
            if t > total:
                self.busy.append(cpus * (1 - (i - idle) / (t - total)))
            total, idle = t, i


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="the run's results folder, to report its size")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("command: give the command to measure after --")
    baseline = mem_used_mb()
    sampler = Sampler()
    start = time.monotonic()
    sampler.start()
    status = subprocess.call(command)
    sampler.stop.set()
    sampler.join()
    wall = time.monotonic() - start
    _, _, cpus = cpu_ticks()
    figures = {
        "command": command, "exit_status": status, "wall_s": round(wall, 1), "cpus": cpus,
        "memory_before_mb": round(baseline),
        "memory_peak_above_before_mb": round(max(sampler.memory, default=baseline) - baseline),
        "busy_cores_mean": round(sum(sampler.busy) / max(len(sampler.busy), 1), 2),
        "busy_cores_p95": (round(percentiles(sampler.busy, [95])[0], 2) if sampler.busy
                           else None),
        "results_mb": round(folder_mb(args.out), 1) if args.out and args.out.is_dir() else None,
    }
    print(f"sizing: {wall:.0f} s; memory {figures['memory_before_mb']} MB in use before, "
          f"peak +{figures['memory_peak_above_before_mb']} MB; busy cores mean "
          f"{figures['busy_cores_mean']} (p95 {figures['busy_cores_p95']}) of {cpus}; "
          f"results {figures['results_mb']} MB", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
