"""The human side of a run: a results table, plots (PNG) and a short Markdown report."""

from __future__ import annotations

from pathlib import Path

from testbed import experiments
from testbed.core import layout
from testbed.core.layout import run_dir
from testbed.host.files import read_jsonl, write_text
from testbed.reports import resilience
from testbed.reports.plots import plt, save


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(summary: dict) -> str:
    """Side-by-side results of every variant, as plain text for the terminal."""
    own = experiments.get(summary.get("kind", experiments.DEFAULT_KIND)).table(summary)
    if own is not None:
        return own
    head = ("variant", "chains ok/all", "p50 ms", "p99 ms", "train Mb/s", "iter p50 ms",
            "fabric up s", "fidelity")
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
            _verdict(run.get("fidelity")),
        ))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _verdict(fidelity: dict | None) -> str:
    if not fidelity:
        return "-"
    return "ok" if fidelity["ok"] else "FLAGGED"


def _measured(run: dict) -> list[tuple[str, int | None, dict]]:
    """(variant, seed or None with one seed, verdict) of every measured run."""
    entries = run.get("seeds") or [run]
    several = len(entries) > 1
    return [(run["name"], e.get("seed") if several else None, e["fidelity"])
            for e in entries if e.get("fidelity")]


def untrusted(summary: dict) -> list[str]:
    """A plain sentence for every run (variant, seed) whose host did not keep up."""
    lines = []
    for run in summary["runs"]:
        for name, seed, verdict in _measured(run):
            if not verdict["ok"]:
                which = f"{name} (seed {seed})" if seed is not None else name
                lines.append(f"Do not trust the numbers of {which}: "
                             + "; ".join(verdict["reasons"]) + ".")
    return lines


def _pair(stats: dict, key: str, a: str, b: str, digits: int = 2) -> str:
    v = stats.get(key) or {}
    return f"{_fmt(v.get(a), digits)} / {_fmt(v.get(b), digits)}"


def fidelity_section(summary: dict) -> list[str]:
    """The Fidelity section: the monitor's verdict and figures, one row per run and seed."""
    rows = [r for run in summary["runs"] for r in _measured(run)]
    if not rows:
        return []
    t = rows[0][2].get("thresholds") or {}
    lines = [
        "## Fidelity", "",
        "Every variant ran beside a monitor that sampled the host once a second "
        "(`fidelity.jsonl` in its folder) and judged the samples of its measured part: a run "
        "is flagged when, in more than "
        f"{100 * t.get('share_max', 0.2):g} % of them, the host had less than "
        f"{100 * t.get('host_idle_min', 0.1):g} % idle CPU, ovs-vswitchd's forwarding thread "
        f"used more than {t.get('ovs_cores_max', 0.9):g} of a core, or saturated links "
        f"sent less than {100 * t.get('delivery_min', 0.9):g} % of what their queues held "
        "for the wire (a queue owes, until the next read, what it holds at a read, as far "
        "as its rate allows).", "",
        "| variant | seed | verdict | samples | host idle p10 / mean | ovs-vswitchd cores "
        "p90 / max | busiest ovs thread p90 / max | lab helpers cores mean / max | "
        "everything else cores mean / p90 | saturated-link delivery p10 (link-samples) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, seed, v in rows:
        st = v.get("stats") or {}
        d = st.get("delivery") or {}
        lines.append(
            f"| {name} | {'-' if seed is None else seed} | {_verdict(v)} | {v['samples']} | "
            f"{_pair(st, 'host_idle', 'p10', 'mean')} | {_pair(st, 'ovs_cores', 'p90', 'max')} | "
            f"{_pair(st, 'ovs_thread_cores', 'p90', 'max')} | "
            f"{_pair(st, 'helpers_cores', 'mean', 'max')} | "
            f"{_pair(st, 'other_cores', 'mean', 'p90')} | "
            f"{_fmt(d.get('p10'), 2)} ({d.get('link_samples', 0)}) |")
    flagged = untrusted(summary)
    lines += ["", *(f"- {line}" for line in flagged)] if flagged else [
        "", "The host kept up in every run."]
    return lines + [""]


def plot_chain_latency(summary: dict, out: Path) -> Path | None:
    """CDF of end-to-end chain latency per variant, log x axis, p50/p99 marked."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = False
    for run in summary["runs"]:
        path = run_dir(run, out) / layout.CHAINS
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
    return save(fig, out / layout.CHAIN_PLOT)


def plot_training(summary: dict, out: Path) -> Path | None:
    """Iteration time of the collective over the run, one line per variant."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    drawn = False
    for run in summary["runs"]:
        folder = run_dir(run, out)
        by_iter: dict[int, list[dict]] = {}
        for path in sorted(folder.glob(layout.RANK_GLOB)):
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
    return save(fig, out / layout.TRAINING_PLOT)


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


def fit_lines(summary: dict) -> list[str]:
    """What ``--fit`` did, for the top of the report (nothing without ``--fit``).

    >>> fit_lines({"fit": {"factor": 0.6, "scaled": True, "line": "fit: 1 core ..."}})[0]
    '**Rates scaled x0.6 to fit this host**: every link, traffic and rate threshold of the \
scenario times 0.6, so the results are of the scaled scenario (fit: 1 core ...).'
    >>> fit_lines({"fit": {"factor": 1.0, "scaled": False, "line": "fit: 4 cores ..."}})
    ['Run with --fit: rates unchanged (fit: 4 cores ...).', '']
    >>> fit_lines({})
    []
    """
    fit = summary.get("fit")
    if not fit:
        return []
    if fit.get("scaled"):
        return [f"**Rates scaled x{fit['factor']:g} to fit this host**: every link, traffic "
                f"and rate threshold of the scenario times {fit['factor']:g}, so the results "
                f"are of the scaled scenario ({fit['line']}).", ""]
    return [f"Run with --fit: rates unchanged ({fit['line']}).", ""]


def write(summary: dict, out: Path) -> Path:
    """Plots plus report.md in ``out``; returns the report's path."""
    chain_png = plot_chain_latency(summary, out)
    train_png = plot_training(summary, out)
    caps = summary["capabilities"]
    warnings = untrusted(summary)
    lines = [
        f"# {summary['scenario']}",
        "",
        *fit_lines(summary),
        *(f"**{line}**" for line in warnings),
        *([""] if warnings else []),
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
    missing = [f"- **{run['name']}**: " + "; ".join(
        f"{field} has no value in seed(s) {', '.join(map(str, seeds))}"
        for field, seeds in run["missing"].items())
        for run in summary["runs"] if run.get("missing")]
    if missing:
        lines += ["Figures missing in some seeds have no median (shown as `-`), rather than "
                  "a median of the seeds that had one:", "", *missing, ""]
    kind = experiments.get(summary.get("kind", experiments.DEFAULT_KIND))
    lines += kind.report_section(summary, out)
    lines += resilience.section(summary, out)
    lines += fidelity_section(summary)
    findings = _findings(summary)
    if findings:
        lines += ["## What changed against the baseline", "", *findings, ""]
    if chain_png:
        lines += [f"![chain latency]({chain_png.name})", ""]
    if train_png:
        lines += [f"![training iterations]({train_png.name})", ""]
    lines += ["## Host capabilities in force", ""]
    lines += [f"- {k}: {v}" for k, v in caps["backends"].items()]
    lines += ["", f"Per-chain, per-hop and per-iteration records are in "
                  f"`{layout.VARIANTS}/NAME/` (`{layout.VARIANTS}/NAME/seedN/` with several "
                  "seeds)."]
    path = out / layout.REPORT
    write_text(path, "\n".join(lines) + "\n")
    return path
