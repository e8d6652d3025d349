"""Telemetry of a variant (``telemetry.jsonl``): its summary numbers and its report section.

The controller writes one line per switch port per sample (see
:mod:`controllers.telemetry`); here they become ``runs[i].telemetry`` in summary.json and
a plot of link utilisation and queue depth per port role over time.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean

from testbed.results import read_jsonl
from topologies.spec import ordered_roles


def roles_of(samples: list[dict]) -> list[str]:
    """The port roles in ``samples``, in report order (a leaf-spine's: leaf uplink, spine
    downlink, leaf downlink; other graphs' by tier from the top).

    >>> roles_of([{"role": "leaf_downlink"}, {"role": "leaf_uplink"}])
    ['leaf_uplink', 'leaf_downlink']
    """
    return ordered_roles({s["role"] for s in samples})


def _by_time(samples: list[dict]) -> dict[float, list[dict]]:
    out: dict[float, list[dict]] = defaultdict(list)
    for s in samples:
        out[s["t"]].append(s)
    return out


def uplink_imbalance(samples: list[dict]) -> list[float]:
    """Per sample time and switch: busiest minus idlest uplink utilisation (the uplinks
    of a leaf, of an edge or aggregation switch).

    >>> rows = [{"t": 1, "switch": "l0", "role": "leaf_uplink", "util": u} for u in (0.9, 0.1)]
    >>> uplink_imbalance(rows)
    [0.8]
    """
    groups: dict[tuple, list[float]] = defaultdict(list)
    for s in samples:
        if s["role"].endswith("_uplink"):
            groups[(s["t"], s["switch"])].append(s["util"])
    return [round(max(u) - min(u), 4) for u in groups.values() if len(u) > 1]


def controller_actions(events_file: Path) -> dict:
    """What the controller did (counts of its events) and the CPU it used (last report).

    >>> controller_actions(Path("/nonexistent"))
    {'flows_placed': 0, 'flows_moved': 0, 'ecn_on': 0, 'ecn_off': 0, 'cpu_s': None}
    """
    counts: dict[str, int] = defaultdict(int)
    cpu = None
    for e in read_jsonl(Path(events_file)):
        counts[e.get("event", "")] += 1
        if e.get("event") == "cpu":
            cpu = round(e["user_s"] + e["system_s"], 2)
    return {"flows_placed": counts["flow_placed"], "flows_moved": counts["flow_moved"],
            "ecn_on": counts["ecn_on"], "ecn_off": counts["ecn_off"], "cpu_s": cpu}


def summarize(telemetry_file: Path, events_file: Path | None = None) -> dict:
    """Peak and mean queue depth, mean utilisation and drops per port role; uplink imbalance.

    Means are over busy samples too idle ones: every sample of every port of the role.
    Drops are each port's qdisc drop counter at the end minus at the start. With
    ``events_file`` (controller-events.jsonl), also ``controller``: what it did.
    """
    samples = list(read_jsonl(Path(telemetry_file)))
    extra = {"controller": controller_actions(events_file)} if events_file else {}
    if not samples:
        return {"samples": 0, **extra}
    times = sorted({s["t"] for s in samples})
    out: dict = {"samples": len(times),
                 "interval_ms": (round(1000 * (times[-1] - times[0]) / (len(times) - 1), 1)
                                 if len(times) > 1 else None),
                 "roles": {}}
    first: dict[str, dict] = {}
    last: dict[str, dict] = {}
    for s in samples:
        first.setdefault(s["ifname"], s)
        last[s["ifname"]] = s
    for role in roles_of(samples):
        rows = [s for s in samples if s["role"] == role]
        if not rows:
            continue
        ports = {s["ifname"] for s in rows}
        out["roles"][role] = {
            "ports": len(ports),
            "peak_backlog_bytes": max(s["backlog_bytes"] for s in rows),
            "mean_backlog_bytes": round(mean(s["backlog_bytes"] for s in rows), 1),
            "mean_util": round(mean(s["util"] for s in rows), 4),
            "peak_util": max(s["util"] for s in rows),
            "qdisc_drops": sum(last[p]["qdisc_drops"] - first[p]["qdisc_drops"] for p in ports),
        }
    imbalance = uplink_imbalance(samples)
    out["uplink_imbalance"] = {
        "mean": round(mean(imbalance), 4) if imbalance else None,
        "max": max(imbalance) if imbalance else None,
    }
    return {**out, **extra}


def _events(variant_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for e in read_jsonl(variant_dir / "controller-events.jsonl"):
        counts[e.get("event", "")] += 1
    return counts


def plot(samples: list[dict], path: Path, title: str) -> Path | None:
    """Mean utilisation and deepest queue per port role over time, one figure."""
    if not samples:
        return None
    from testbed.plots import plt, save

    t0 = min(s["t"] for s in samples)
    fig, (ax_u, ax_q) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for role in roles_of(samples):
        series = _by_time([s for s in samples if s["role"] == role])
        if not series:
            continue
        ts = sorted(series)
        x = [t - t0 for t in ts]
        ax_u.plot(x, [mean(s["util"] for s in series[t]) for t in ts],
                  label=role.replace("_", " "), lw=1)
        ax_q.plot(x, [max(s["backlog_bytes"] for s in series[t]) / 1000 for t in ts],
                  label=role.replace("_", " "), lw=1)
    ax_u.set_ylabel("mean utilisation")
    ax_u.set_ylim(0, 1.05)
    ax_q.set_ylabel("deepest queue (KB)")
    ax_q.set_xlabel("time (s)")
    ax_u.legend(loc="upper right", fontsize=8)
    ax_u.set_title(f"{title}: link utilisation and egress queue depth per port role")
    return save(fig, path, dpi=100)


def section(variant_dir: Path, title: str,
            root: Path | None = None) -> tuple[str, list[str]]:
    """Markdown for one variant's telemetry and the PNGs it refers to (paths relative to
    the report in ``root``; without it, two levels above ``variant_dir``)."""
    variant_dir = Path(variant_dir)
    telemetry = variant_dir / "telemetry.jsonl"
    summary = summarize(telemetry)
    if not summary.get("samples"):
        return "", []
    lines = [f"### {title}", "",
             f"{summary['samples']} samples every {summary['interval_ms']} ms.", "",
             "| port role | ports | mean util | peak util | mean queue (KB) | "
             "peak queue (KB) | queue drops |",
             "|---|---|---|---|---|---|---|"]
    for role, r in summary["roles"].items():
        lines.append(f"| {role.replace('_', ' ')} | {r['ports']} | {r['mean_util']:.2f} | "
                     f"{r['peak_util']:.2f} | {r['mean_backlog_bytes'] / 1000:.1f} | "
                     f"{r['peak_backlog_bytes'] / 1000:.1f} | {r['qdisc_drops']:,} |")
    imb = summary["uplink_imbalance"]
    if imb["mean"] is not None:
        lines += ["", f"Uplink imbalance (busiest minus idlest uplink of a switch): mean "
                      f"{imb['mean']:.2f}, max {imb['max']:.2f}."]
    events = _events(variant_dir)
    acts = [f"{events[name]} {word}" for name, word in
            (("flow_placed", "flows placed"), ("flow_moved", "elephant moves"),
             ("ecn_on", "CE-marking starts"), ("ecn_off", "CE-marking stops"))
            if events.get(name)]
    if acts:
        lines += ["", "Controller actions: " + ", ".join(acts) + "."]
    png = plot(list(read_jsonl(telemetry)), variant_dir / "telemetry.png", title)
    names = []
    if png:
        rel = (str(png.relative_to(root)) if root is not None
               else f"variants/{variant_dir.name}/{png.name}")
        lines += ["", f"![telemetry {title}]({rel})"]
        names.append(rel)
    return "\n".join(lines) + "\n", names
