"""The human side of a run: a results table, plots (PNG) and a short Markdown report."""

from __future__ import annotations

import importlib
from pathlib import Path

from testbed import comparison, resilience_report, telemetry_report
from testbed.plots import plt, save
from testbed.results import read_jsonl
from testbed.scenario import EXPERIMENTS


def run_dir(run: dict, out: Path) -> Path:
    """Folder of a run's records (with several seeds: the first seed's)."""
    return out / run.get("dir", f"variants/{run['name']}")


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(summary: dict) -> str:
    """Side-by-side results of every variant, as plain text for the terminal."""
    kind = summary.get("kind", "fabric")
    if kind != "fabric":
        module = importlib.import_module(EXPERIMENTS[kind])
        if hasattr(module, "table"):
            return module.table(summary[kind])
    head = ("variant", "chains ok/all", "p50 ms", "p99 ms", "train Mb/s", "iter p50 ms",
            "fabric up s")
    rows = [head]
    for run in summary["runs"]:
        a, t, f = run["agents"], run["training"], run["fabric"]
        rows.append((
            run["name"],
            f"{a['chains_completed']}/{a['chains_started']}",
            _fmt(a["latency_ms"]["p50"]),
            _fmt(a["latency_ms"]["p99"]),
            _fmt(t["goodput_mbps"]) if t["iterations"] else "-",
            _fmt(t["iteration_ms"]["p50"]) if t["iterations"] else "-",
            _fmt(f["start_s"], 2),
        ))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot_chain_latency(summary: dict, out: Path) -> Path | None:
    """CDF of end-to-end chain latency per variant, log x axis, p50/p99 marked."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    for run in summary["runs"]:
        path = run_dir(run, out) / "chains.jsonl"
        values = sorted(c["latency_ms"] for c in read_jsonl(path) if c.get("ok"))
        if not values:
            continue
        n = len(values)
        ax.plot(values, [(i + 1) / n for i in range(n)], label=(
            f"{run['name']} (p50 {_fmt(run['agents']['latency_ms']['p50'])} ms, "
            f"p99 {_fmt(run['agents']['latency_ms']['p99'])} ms)"))
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.axhline(0.5, color="grey", lw=0.5, ls=":")
    ax.axhline(0.99, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("agent chain latency, end to end (ms, log scale)")
    ax.set_ylabel("fraction of chains")
    ax.set_title(f"{summary['scenario']}: chain latency per variant")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return save(fig, out / "chain_latency.png")


def plot_training(summary: dict, out: Path) -> Path | None:
    """Iteration time of the collective over the run, one line per variant."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    drawn = False
    for run in summary["runs"]:
        folder = run_dir(run, out)
        by_iter: dict[int, list[dict]] = {}
        for path in sorted(folder.glob("training-rank*.jsonl")):
            for rec in read_jsonl(path):
                by_iter.setdefault(rec["iteration"], []).append(rec)
        if not by_iter:
            continue
        t0 = min(r["start"] for recs in by_iter.values() for r in recs)
        xs, ys = [], []
        for _, recs in sorted(by_iter.items()):
            xs.append(min(r["start"] for r in recs) - t0)
            ys.append((max(r["end"] for r in recs) - min(r["start"] for r in recs)) * 1000)
        ax.plot(xs, ys, marker=".", label=run["name"])
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("time into the run (s)")
    ax.set_ylabel("all-reduce iteration (ms)")
    ax.set_title("training iterations (compute + ring all-reduce)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out / "training_iterations.png")


def _findings(summary: dict) -> list[str]:
    """Plain-language comparison against the first variant (the baseline)."""
    runs = summary["runs"]
    base = runs[0] if runs else None
    lines = []
    if not base or base["agents"]["latency_ms"]["p99"] is None:
        return lines
    b50, b99 = base["agents"]["latency_ms"]["p50"], base["agents"]["latency_ms"]["p99"]
    for run in runs[1:]:
        lat = run["agents"]["latency_ms"]
        if lat["p99"] is None:
            lines.append(f"- **{run['name']}**: no chain completed.")
            continue
        line = (f"- **{run['name']}**: chain p50 {lat['p50'] / b50:.2f}x and p99 "
                f"{lat['p99'] / b99:.2f}x the baseline ({base['name']}); "
                f"{run['agents']['chains_failed']} chains failed")
        training = run["training"]
        if training["iterations"]:
            line += (f"; training goodput {training['goodput_mbps']:.1f} Mb/s with "
                     f"{training.get('packets_lost', 0)} packets lost")
        lines.append(line + ".")
    return lines


def _queue_lines(summary: dict) -> list[str]:
    """Where the switches dropped packets, per variant: the evidence for the 'why'."""
    lines = []
    for run in summary["runs"]:
        queues = run["fabric"].get("queues")
        if not queues:
            continue
        parts = [f"{role.replace('_', ' ')} ports {q['drops']:,} "
                 f"({q['bytes'] / 1e6:,.1f} MB sent)"
                 for role, q in queues.items() if role != "most_drops"]
        worst = queues.get("most_drops")
        tail = f"; most at {worst['port']} ({worst['drops']:,})" if worst else ""
        lines.append(f"- **{run['name']}**: dropped at {', '.join(parts)}{tail}.")
    return lines


def ecn_lines(summary: dict) -> list[str]:
    """CE marks of the phantom-queue marker per variant: per class and where they fell."""
    lines = []
    for run in summary["runs"]:
        ecn = run.get("ecn")
        if not ecn or ecn.get("backend") != "phantom":
            continue
        marked = ecn["marked"]
        roles = ", ".join(f"{role.replace('_', ' ')} {sum(m.values()):,}"
                          for role, m in ecn.get("by_role", {}).items() if sum(m.values()))
        seeds = " (median over seeds)" if len(run.get("seeds", [])) > 1 else ""
        lines.append(f"- **{run['name']}**: phantom queues draining at {ecn['drain']:g} x the "
                     f"link rate marked CE on {marked['collective']:,} collective and "
                     f"{marked['agents']:,} agent packets{seeds}"
                     + (f"; by port role: {roles}." if roles else "."))
    return lines


def telemetry_lines(summary: dict, out: Path) -> list[str]:
    """One telemetry section per variant that recorded port samples."""
    parts = [telemetry_report.section(out / run.get("dir", f"variants/{run['name']}"),
                                      run["name"], root=out)[0]
             for run in summary["runs"] if run.get("telemetry", {}).get("samples")]
    parts = [p for p in parts if p]
    return ["## Switch telemetry", "", *parts] if parts else []


def write(summary: dict, out: Path) -> Path:
    """Plots plus report.md in ``out``; returns the report's path."""
    chain_png = plot_chain_latency(summary, out)
    train_png = plot_training(summary, out)
    caps = summary["capabilities"]
    lines = [
        f"# {summary['scenario']}",
        "",
        summary.get("description", ""),
        "",
        f"Seed {summary['seed']}, {summary['duration_s']:g} s of traffic per variant. "
        f"Measured on kernel {caps['kernel']} with the {caps['backends']['switch datapath']}.",
        "",
        "## Results",
        "",
        "```",
        table(summary),
        "```",
        "",
        "Chain latency is end to end: a chain waits at every hop, so it is the sum of the "
        "hops' latencies (each hop is a fresh TCP connection, request and reply).",
        "",
    ]
    kind = summary.get("kind", "fabric")
    if kind != "fabric":
        module = importlib.import_module(EXPERIMENTS[kind])
        lines += [*module.report_section(summary[kind], out), ""]
    if kind == "fabric":  # seeds, medians, ratios, goodput and DCQCN rate plots
        lines += comparison.section(summary, out)
    lines += resilience_report.section(summary, out)
    findings = _findings(summary)
    if findings:
        lines += ["## What changed against the baseline", "", *findings, ""]
    queue_lines = _queue_lines(summary)
    if queue_lines:
        lines += ["## Where the switches dropped packets", "",
                  "Egress drops per port role (switch buffers are "
                  f"{summary['runs'][0]['fabric'].get('queue_kb', '?')} KB a port):", "",
                  *queue_lines, ""]
        send = [run["fabric"].get("ovs_send_buffer_bytes") for run in summary["runs"]]
        small = [b for b in send if b is not None and b < 4 * 1024 * 1024]
        if small:
            lines += [f"Measured with ovs-vswitchd's shared send socket at {min(small) // 1024} "
                      "KB: all switch queues together held at most that, and frames beyond it "
                      "were dropped by ovs-vswitchd (EAGAIN, in its log), not by a queue.", ""]
    marks = ecn_lines(summary)
    if marks:
        lines += ["## ECN marks in the switches", "",
                  "Per-packet marking by phantom queues in the switch ports' egress path "
                  "(nftables): a token bucket per port and threshold, draining slower than "
                  "the link, marks ECN-capable packets before the real queue builds.", "",
                  *marks, ""]
    if chain_png:
        lines += [f"![chain latency]({chain_png.name})", ""]
    if train_png:
        lines += [f"![training iterations]({train_png.name})", ""]
    lines += telemetry_lines(summary, out)
    lines += ["## Host capabilities in force", ""]
    lines += [f"- {k}: {v}" for k, v in caps["backends"].items()]
    lines += ["", "Per-chain, per-hop and per-iteration records are in `variants/NAME/`."]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
