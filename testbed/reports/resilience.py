"""Report section for runs with faults: the fault table and one timeline per variant.

The timeline shows, against seconds since traffic started: every chain (dot at its
end time, height its latency; failed chains as red crosses at the top), lost probes
(ticks), training goodput per iteration (second axis), each fault as a line and the
span until its repair (shaded), and controller/host detections.
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.core import layout
from testbed.core.layout import run_dirs
from testbed.faults import accounting
from testbed.host.files import read_jsonl
from testbed.reports.plots import plt, save

DEFINITIONS = [
    "- **detect_ms**: from the fault to the first sign that a layer noticed it "
    "(controller port_status / recomputed / drain, a chain hop that skipped or retried a "
    "plane, a training iteration on fewer channels; `connected` after a restart).",
    "- **repair_ms**: from the fault to the send time (stamped when sent) of the first "
    "probe delivered after the last lost one, the maximum over probe streams that lost "
    "probes (100 probes/s per stream, host pairs on different leaves, every plane), once "
    "loss has stopped (at most 1 % lost from then on). The repair happened somewhere "
    "between the last lost probe and that first delivered one, so the figure is an upper "
    "bound known to one probe interval, its resolution (res.; 10 ms at 100/s): 8 (res. "
    "10) means between 0 and 8 ms, and cannot tell 8.2 from 8.9 ms. 0 when no probe was "
    "lost; `-` when some stream was never "
    "repaired within the window (`unrepaired`: e.g. the probes pinned to a failed plane, "
    "which no layer can move; hosts' own traffic is judged by the chain and training "
    "columns).",
    "- **lost**: probes sent in the window that never arrived.",
    "- **chains failed / delayed**: chains in flight in the window that failed (error or "
    "time-out) / completed above the pre-fault p99; **+p99**: their p99 minus the "
    "pre-fault p99 (n: completed chains in the window; the pre-fault p99 is over the chains "
    "completed before the first fault, at least 20, given with the table); **p99 back**: "
    "start of the first 1 s bin after the fault, of at least 5 chains (n), whose p99 (a "
    "failed chain counts as infinitely slow) is within 10 % of the pre-fault p99. Every p99 "
    "is interpolated between closest ranks (as numpy's default); a bin of few chains has a "
    "p99 close to its slowest chain.",
    "- **training back**: from the fault to the end of the last iteration in the window "
    "that lost a packet or hit a step time-out (any rank), once every rank had a clean "
    "iteration after it; 0 only when no iteration in the window was hurt; `-` when some "
    "rank was still hurt at the end of the window.",
]


def _fmt(v, digits: int = 0) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _repair(f: dict) -> str:
    """repair_ms in whole ms with the probes' resolution: ``8 (res. 10)``."""
    v, res = f["repair_ms"], f.get("repair_resolution_ms")
    if v is None or not v or res is None:
        return _fmt(v)
    return f"{_fmt(v)} (res. {res:g})"


def _with_n(v, n, digits: int = 0) -> str:
    """A figure with the number of samples it rests on: ``12.3 (n=40)``."""
    return _fmt(v, digits) if v is None or n is None else f"{_fmt(v, digits)} (n={n})"


def fault_table(summary: dict) -> list[str]:
    rows = ["| variant | fault | at s | detect ms | by | repair ms | unrepaired | lost | "
            "chains failed | delayed | +p99 ms | p99 back ms | training back ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in summary.get("faults", []):
        rows.append("| " + " | ".join([
            f["variant"], f"{f['fault']} {f['target']}", _fmt(f["at_s"], 1),
            _fmt(f["detect_ms"], 1), _fmt(f["detected_by"]), _repair(f),
            _fmt(f["unrepaired_streams"]), _fmt(f["lost_packets"]), _fmt(f["chains_failed"]),
            _fmt(f["chains_delayed"]), _with_n(f["added_p99_ms"], f.get("window_chains"), 1),
            _with_n(f["p99_recovery_ms"], f.get("p99_recovery_bin_chains")),
            _fmt(f.get("training_recovery_ms"))]) + " |")
    baselines = sorted({(f["variant"], f["baseline_chains"]) for f in summary.get("faults", [])
                        if f.get("baseline_chains")})
    if baselines:
        rows += ["", "Pre-fault p99 over " + ", ".join(f"{n} chains ({v})" for v, n in baselines)
                 + "."]
    return rows


def plot_timeline(run: dict, out: Path, vdir: Path, title: str) -> Path | None:
    """The fault timeline of one variant and seed (see the module doc), whose records
    are in ``vdir``; ``run`` is that seed's entry."""
    meta = vdir / layout.FAULTS
    if not meta.exists():
        return None
    times = json.loads(meta.read_text())
    t0, end = times["t0"], times["end"] - accounting.LATE_S
    chains = list(read_jsonl(vdir / layout.CHAINS))
    fig, ax = plt.subplots(figsize=(9, 4))
    ok = [c for c in chains if c["ok"]]
    ax.scatter([c["end"] - t0 for c in ok], [c["latency_ms"] for c in ok], s=4,
               color="tab:blue", label="chain latency (ms)")
    top = max([c["latency_ms"] for c in ok] + [100]) * 1.3
    bad = [c for c in chains if not c["ok"]]
    if bad:
        ax.scatter([c["end"] - t0 for c in bad], [top] * len(bad), marker="x", color="red",
                   label=f"failed chain ({len(bad)})")
    streams = accounting.probe_streams(
        rec for f in sorted(vdir.glob(layout.PROBE_GLOB)) for rec in read_jsonl(f))
    # probes sent before traffic started (ARP warm-up) or too late to be received: not shown
    lost = [s.send_time(q) - t0 for s in streams.values()
            for q in s.seqs_between(t0, end) if q not in s.received]
    if lost:
        ax.scatter(lost, [top * 0.9] * len(lost), marker="|", color="black", s=30,
                   label=f"lost probe ({len(lost)})")
    for f in run.get("faults", []):
        start = f["started"] - t0
        ax.axvline(start, color="red", lw=1)
        ax.text(start, top * 1.02, f"{f['fault']}", fontsize=7, rotation=0, color="red")
        if f["repair_ms"]:
            ax.axvspan(start, start + f["repair_ms"] / 1000, color="orange", alpha=0.3)
        if f["detect_ms"] is not None:
            ax.axvline(start + f["detect_ms"] / 1000, color="green", lw=0.8, ls="--")
    ranks = sorted(vdir.glob(layout.RANK_GLOB))
    if ranks:
        it = list(read_jsonl(ranks[0]))
        ax2 = ax.twinx()
        ax2.plot([r["end"] - t0 for r in it],
                 [r["bytes_received"] * 8 / max(r["comm_ms"], 1e-3) / 1e3 for r in it],
                 color="tab:purple", lw=1, drawstyle="steps-pre")
        ax2.set_ylabel("rank 0 goodput per iteration (Mb/s)", color="tab:purple")
    ax.set_ylim(0, top * 1.1)
    ax.set_xlabel("seconds since traffic started (red: fault, green dashed: detected, "
                  "orange: until repaired)")
    ax.set_ylabel("chain latency (ms)")
    ax.set_title(f"{title}: faults and repair")
    ax.legend(loc="upper left", fontsize=7)
    return save(fig, out / layout.timeline_plot(title), dpi=100)


def section(summary: dict, out: Path) -> list[str]:
    """Markdown lines of the faults section (empty when no run had faults)."""
    if not summary.get("faults"):
        return []
    lines = ["## Faults and repair", "", *fault_table(summary), "", *DEFINITIONS, ""]
    for run in summary["runs"]:  # one timeline per variant and seed
        entries = run.get("seeds") or [run]
        for entry, vdir in zip(entries, run_dirs(run, out), strict=True):
            title = run["name"] + (f" seed{entry['seed']}" if len(entries) > 1 else "")
            png = plot_timeline(entry, out, vdir, title)
            if png:
                lines += [f"![{title} timeline]({png.name})", ""]
    return lines
