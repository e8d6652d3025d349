"""The traffic-class figure of a variant: each class's queue over time (summed over the
switch ports) and how many ports PFC held paused, from ``class-telemetry.jsonl`` and
``pfc-events.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.core import layout
from testbed.reports.plots import plt, save


def class_backlog(path: Path) -> tuple[list[str], list[float], dict[str, list[float]]]:
    """Classes, sample times and each class's backlog summed over the ports (KB)."""
    classes, times, series = [], [], {}
    with open(path) as f:
        for n, line in enumerate(f):
            rec = json.loads(line)
            if n == 0:
                classes = rec["classes"]
                series = {c: [] for c in classes}
                continue
            times.append(rec["t"])
            for i, c in enumerate(classes):
                series[c].append(sum(v[i][2] for v in rec["ports"].values() if v and v[i])
                                 / 1000)
    return classes, times, series


def paused_ports(path: Path) -> tuple[list[float], list[int]]:
    """A step series: how many port queues were paused, at each change."""
    paused: set[tuple[str, int]] = set()
    times, counts = [0.0], [0]
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if "state" not in e:  # failed changes carry "failed", not "state"
                continue
            key = (e["port"], e["priority"])
            (paused.add if e["state"] == "paused" else paused.discard)(key)
            times.append(e["t"])
            counts.append(len(paused))
    return times, counts


def plot(variant_dir: Path, title: str) -> Path | None:
    """Write ``qos.png`` into ``variant_dir``; None when the variant had no classes."""
    samples = variant_dir / layout.CLASS_TELEMETRY
    if not samples.is_file() or samples.stat().st_size == 0:
        return None
    classes, times, series = class_backlog(samples)
    if not times:
        return None
    events = variant_dir / layout.PFC_EVENTS
    pauses = paused_ports(events) if events.is_file() else ([], [])
    rows = 2 if len(pauses[0]) > 1 else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.6 * rows), sharex=True, squeeze=False)
    ax = axes[0][0]
    for c in classes:
        ax.plot(times, series[c], label=c, linewidth=1)
    ax.set_ylabel("queued, all switch ports (KB)")
    ax.set_title(f"{title}: traffic classes")
    ax.legend(loc="upper right", fontsize="small")
    if rows == 2:
        ax2 = axes[1][0]
        ax2.step(pauses[0], pauses[1], where="post", color="tab:red", linewidth=1)
        ax2.set_ylabel("port queues paused")
    axes[-1][0].set_xlabel("seconds since the PFC agent started")
    return save(fig, variant_dir / layout.QOS_PLOT)
