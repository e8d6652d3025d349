"""The key figure of each lesson page, from a real run: ``make figures`` (or
``python scripts/lesson_figures.py [FIGURE ...] [--from RESULTS_ROOT]``).

For each figure it runs the scenario file named in :data:`FIGURES` as shipped
(``testbed run FILE --out results/figures/NAME``; ``--from`` takes folders already run),
refuses the run when the fidelity monitor flagged any of its variants (such a run
measures the host, not the lab), and copies the plot the page shows to
``docs/img/runs/NAME.png`` with ``docs/img/runs/NAME.json`` beside it: the command, the
date, the machine and the run's own figures, which the page's caption repeats.
Exit 1 when a run failed or was flagged; its old figure is left as it was.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.host.capabilities import machine  # noqa: E402
from testbed.reports.grading import Results  # noqa: E402

OUT = REPO / "docs" / "img" / "runs"
#: lesson figure -> (the scenario file run, the plot of its results folder the page shows).
#: Storage: lab 9's starter (1 MB caches, links at 20 Mb/s), not storage-cache.yaml,
#: whose throughput step of 8 readers at 100 Mb/s leaves 2 cores no idle time (flagged).
FIGURES = {
    "ecmp-vs-adaptive": ("scenarios/ecmp-vs-adaptive.yaml", "goodput.png"),
    "lossless": ("scenarios/lossless.yaml", "variants/pfc/qos.png"),
    "storage": ("labs/lab09_storage/starter/scenario.yaml", "chain_latency.png"),
    "cross-region-writes": ("scenarios/cross-region-writes.yaml", "checkpoint_lag.png"),
    "backbone-failover": ("scenarios/backbone-failover.yaml", "probe_loss.png"),
}


def figure(name: str, root: Path, run: bool) -> str | None:
    """Run (or read) one lesson's scenario and copy its figure; the reason it could not."""
    folder = root / name
    scenario_file, plot_name = FIGURES[name]
    command = [".venv/bin/testbed", "run", scenario_file, "--out",
               str(folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder)]
    if run:
        print(f"figures: {' '.join(command)}", file=sys.stderr)
        if subprocess.call(command, cwd=REPO) != 0:
            return "the run failed"
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        return f"no {summary_path}"
    summary = json.loads(summary_path.read_text())
    flagged = Results(folder, summary).flagged()
    if flagged:
        return f"flagged by the fidelity monitor: {', '.join(flagged)} (rerun on a quiet host)"
    plot = folder / plot_name
    if not plot.is_file():
        return f"the run wrote no {plot_name}"
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plot, OUT / f"{name}.png")
    record = {"figure": name, "plot": plot_name, "command": " ".join(command[:3]),
              "date": datetime.date.today().isoformat(), "machine": machine(),
              "variants": [r["name"] for r in summary.get("runs", [])],
              "fidelity": "no variant flagged"}
    (OUT / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("figures", nargs="*", metavar="FIGURE",
                    help=f"which figures (default: all: {', '.join(FIGURES)})")
    ap.add_argument("--from", dest="source", type=Path,
                    help="take the results folders already run under this folder "
                         "(RESULTS/NAME) instead of running them")
    args = ap.parse_args()
    unknown = [s for s in args.figures if s not in FIGURES]
    if unknown:
        ap.error(f"FIGURE: no lesson figure {', '.join(unknown)} "
                 f"(known: {', '.join(FIGURES)})")
    root = (args.source or REPO / "results" / "figures").resolve()
    misses = []
    for name in args.figures or FIGURES:
        why = figure(name, root, run=args.source is None)
        if why:
            misses.append(f"{name}: {why}")
            print(f"figures: MISS {name}: {why}", file=sys.stderr)
        else:
            print(f"figures: {name} -> {(OUT / f'{name}.png').relative_to(REPO)}",
                  file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
