"""Variants side by side over seeds: medians, per-seed values, ratios, and the plots that
show why (goodput per seed, DCQCN rates under CNPs).

A variant's baseline is the first non-reference variant with the same traffic pattern
(``ecmp-stride`` for ``adaptive-stride``, ``ecn-off`` for ``ecn-tuned``); its reference is
the variant marked ``reference: true`` (the same hosts on one non-blocking switch).
"""

from __future__ import annotations

from pathlib import Path

from testbed.core import layout
from testbed.core.layout import RANK_GLOB, run_dir
from testbed.host.files import read_jsonl
from testbed.reports.plots import plt, save


def _fmt(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def baseline_of(run: dict, runs: list[dict]) -> dict | None:
    """The first non-reference run with the same pattern (the run itself if it is first).

    >>> runs = [{"name": "e", "pattern": "stride"}, {"name": "a", "pattern": "stride"},
    ...         {"name": "r", "pattern": "stride", "reference": True},
    ...         {"name": "e2", "pattern": "random"}]
    >>> [baseline_of(r, runs)["name"] for r in runs]
    ['e', 'e', 'e', 'e2']
    """
    same = [r for r in runs if not r.get("reference") and r.get("pattern") == run.get("pattern")]
    return same[0] if same else (runs[0] if runs else None)


def reference_of(run: dict, runs: list[dict]) -> dict | None:
    """The reference run with the same pattern, else any reference run, else None."""
    refs = [r for r in runs if r.get("reference")]
    same = [r for r in refs if r.get("pattern") == run.get("pattern")]
    return (same or refs or [None])[0]


def _per_seed(run: dict, get) -> str:
    values = [get(s) for s in run.get("seeds", [])]
    return " / ".join(_fmt(v) for v in values) if values else "-"


def _goodput(entry: dict):
    t = entry["training"]
    return t["goodput_mbps"] if t.get("iterations") else None


def _p99(entry: dict):
    return entry["agents"]["latency_ms"]["p99"]


def training_table(summary: dict) -> list[str]:
    runs = [r for r in summary["runs"] if r["training"].get("iterations")]
    if not runs:
        return []
    has_ref = any(r.get("reference") for r in runs)
    head = ["variant", "pattern", "goodput Mb/s (median)", "per seed", "x baseline"]
    head += ["x reference"] if has_ref else []
    head += ["iteration p50 ms", "lost pkts (late)", "reordered pkts", "CNPs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        t = run["training"]
        base = baseline_of(run, summary["runs"])
        row = [run["name"] + (" (reference)" if run.get("reference") else ""),
               run.get("pattern", "-"), _fmt(_goodput(run)), _per_seed(run, _goodput),
               _ratio(_goodput(run), _goodput(base) if base else None)]
        if has_ref:
            ref = reference_of(run, summary["runs"])
            row.append(_ratio(_goodput(run), _goodput(ref) if ref else None))
        late = f" ({t['packets_late']})" if t.get("packets_late") else ""
        row += [_fmt(t["iteration_ms"]["p50"]), f"{t.get('packets_lost', '-')}{late}",
                str(t.get("reordered_packets", "-")), str(t.get("cnps_received", "-"))]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def agents_table(summary: dict) -> list[str]:
    runs = [r for r in summary["runs"] if r["agents"]["latency_ms"]["p99"] is not None]
    if not runs:
        return []
    head = ["variant", "chain p50 ms", "chain p99 ms", "p99 per seed", "p99 x baseline",
            "training Mb/s", "training x baseline"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs:
        base = baseline_of(run, summary["runs"])
        lat = run["agents"]["latency_ms"]
        lines.append("| " + " | ".join([
            run["name"], _fmt(lat["p50"]), _fmt(lat["p99"]), _per_seed(run, _p99),
            _ratio(lat["p99"], _p99(base) if base else None), _fmt(_goodput(run)),
            _ratio(_goodput(run), _goodput(base) if base else None)]) + " |")
    return lines


def plot_goodput(summary: dict, out: Path) -> Path | None:
    """Bars: median training goodput per variant; dots: each seed."""
    runs = [r for r in summary["runs"] if r["training"].get("iterations")]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(runs)), 4))
    xs = range(len(runs))
    ax.bar(xs, [_goodput(r) or 0 for r in runs],
           color=["grey" if r.get("reference") else "tab:blue" for r in runs], alpha=0.7)
    for x, run in zip(xs, runs, strict=True):
        seeds = [_goodput(s) for s in run.get("seeds", [])]
        ax.plot([x] * len(seeds), [s or 0 for s in seeds], "k.", ms=8)
    ax.set_xticks(list(xs), [r["name"] for r in runs], rotation=30, ha="right")
    ax.set_ylabel("aggregate training goodput (Mb/s)")
    ax.set_title(f"{summary['scenario']}: median over seeds (bars), each seed (dots)")
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, out / layout.GOODPUT_PLOT)


def _bisection(entry: dict):
    e = entry.get("elephants") or {}
    return e.get("aggregate_mbps") if e.get("measured") else None


def elephants_table(summary: dict) -> list[str]:
    """Per pattern: aggregate elephant goodput (bisection bandwidth) of every variant, as
    a fraction of the non-blocking reference's, Hedera's figure of merit."""
    runs = [r for r in summary["runs"] if _bisection(r) is not None]
    if not runs:
        return []
    head = ["pattern", "variant", "controller", "bisection Mb/s (median)", "per seed",
            "of NICs", "x baseline", "of non-blocking", "flows measured"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in sorted(runs, key=lambda r: [x["pattern"] for x in runs].index(r["pattern"])):
        base, ref = baseline_of(run, summary["runs"]), reference_of(run, summary["runs"])
        e = run["elephants"]
        lines.append("| " + " | ".join([
            run.get("pattern", "-"), run["name"] + (" (reference)" if run.get("reference")
                                                    else ""),
            run.get("controller_mode", "-"), _fmt(_bisection(run)), _per_seed(run, _bisection),
            _fmt(e.get("of_nics"), 2), _ratio(_bisection(run), _bisection(base) if base else None),
            _ratio(_bisection(run), _bisection(ref) if ref else None),
            f"{e.get('measured', 0)}/{e.get('flows', 0)}"]) + " |")
    return lines


def plot_elephants(summary: dict, out: Path) -> Path | None:
    """Grouped bars: each pattern's bisection bandwidth per variant kind, as a fraction of
    what the hosts' NICs allow (Hedera's Figure 10, at this lab's scale)."""
    runs = [r for r in summary["runs"] if _bisection(r) is not None]
    if not runs:
        return None
    patterns = list(dict.fromkeys(r["pattern"] for r in runs))
    kinds = list(dict.fromkeys("non-blocking" if r.get("reference") else
                               r.get("controller_mode", "-") for r in runs))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(patterns) * len(kinds) / 2), 4))
    width = 0.8 / len(kinds)
    for k, kind in enumerate(kinds):
        xs, ys = [], []
        for x, pattern in enumerate(patterns):
            for r in runs:
                rk = "non-blocking" if r.get("reference") else r.get("controller_mode", "-")
                if r["pattern"] == pattern and rk == kind:
                    xs.append(x + (k - (len(kinds) - 1) / 2) * width)
                    ys.append(r["elephants"]["of_nics"] or 0)
        ax.bar(xs, ys, width, label=kind,
               color="grey" if kind == "non-blocking" else None, alpha=0.8)
    ax.set_xticks(range(len(patterns)), patterns, rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("aggregate goodput / sum of NIC rates")
    ax.set_title(f"{summary['scenario']}: bisection bandwidth per pattern (median over seeds)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out / layout.BISECTION_PLOT)


def plot_dcqcn(summary: dict, out: Path) -> Path | None:
    """Each rank's DCQCN rate over time (channel 0), one panel per variant that ran it."""
    panels = []
    for run in summary["runs"]:
        folder = run_dir(run, out)
        traces = {}
        for path in sorted(folder.glob(RANK_GLOB)):
            points = [p for rec in read_jsonl(path) for p in rec.get("rate_trace", [])]
            cnps = sum(rec.get("cnps_received", 0) for rec in read_jsonl(path))
            if points:
                traces[path.stem.removeprefix("training-")] = (points, cnps)
        if traces:
            panels.append((run["name"], traces))
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.8 * len(panels)), squeeze=False)
    for ax, (name, traces) in zip(axes[:, 0], panels, strict=True):
        t0 = min(p[0] for pts, _ in traces.values() for p in pts)
        for rank, (pts, cnps) in traces.items():
            ax.step([p[0] - t0 for p in pts], [p[1] for p in pts], where="post",
                    label=f"{rank} ({cnps} CNPs)")
        ax.set_title(f"{name}: DCQCN sending rate per rank (channel 0)")
        ax.set_ylabel("Mb/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("time into the run (s)")
    return save(fig, out / layout.DCQCN_PLOT)


def section(summary: dict, out: Path) -> list[str]:
    """The report's side-by-side section (Markdown lines); empty when there is nothing."""
    seeds = summary.get("seeds") or [summary.get("seed")]
    lines = []
    train, agents = training_table(summary), agents_table(summary)
    elephants = elephants_table(summary)
    if train or agents or elephants:
        lines += ["## Variants side by side", "",
                  f"Medians over {len(seeds)} seed(s) ({', '.join(map(str, seeds))}); "
                  "per-seed values in seed order; ratios against the first variant of the "
                  "same pattern" + (" and against the non-blocking reference"
                                    if any(r.get("reference") for r in summary["runs"])
                                    else "") + ".", ""]
    if train:
        lines += ["### Training (aggregate goodput, iteration times)", "", *train, "",
                  "Lost: packets a step was still missing at its time-out; (late): how many "
                  "of them arrived after it, delayed rather than dropped.", ""]
    if agents:
        lines += ["### Agent chains", "", *agents, ""]
    if elephants:
        lines += ["### Elephant flows (bisection bandwidth per pattern)", "",
                  "One long TCP flow from every host; the sum of their goodputs is the "
                  "bisection bandwidth the fabric gave the pattern. \"of non-blocking\" "
                  "divides it by the reference's (the same flows on one switch).", "",
                  *elephants, ""]
        png = plot_elephants(summary, out)
        if png:
            lines += [f"![bisection bandwidth per pattern]({png.name})", ""]
    png = plot_goodput(summary, out)
    if png:
        lines += [f"![goodput per variant]({png.name})", ""]
    png = plot_dcqcn(summary, out)
    if png:
        lines += ["DCQCN at work: every CNP cuts a sender's rate by alpha/2, then fast "
                  "recovery, additive and hyper increase bring it back.", "",
                  f"![DCQCN rates]({png.name})", ""]
    return lines
