"""Telemetry of a variant (``telemetry.jsonl``): its summary numbers and its report section.

The controller writes one line per switch port per sample, or a short line for the ports
of a switch that did not change (see :mod:`controllers.telemetry`); here they are
streamed (never read whole) and become ``runs[i].telemetry`` in summary.json and
a plot of link utilisation and queue depth per port role over time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

from controllers.telemetry import expand
from testbed.core import layout
from testbed.host.files import read_jsonl
from topologies.spec import ordered_roles


def roles_of(samples: Iterable[dict]) -> list[str]:
    """The port roles in ``samples``, in report order (a leaf-spine's: leaf uplink, spine
    downlink, leaf downlink; other graphs' by tier from the top).

    >>> roles_of([{"role": "leaf_downlink"}, {"role": "leaf_uplink"}])
    ['leaf_uplink', 'leaf_downlink']
    """
    return ordered_roles({s["role"] for s in samples})


def port_samples(telemetry_file: Path) -> Iterator[dict]:
    """Every port sample of a ``telemetry.jsonl``, one at a time (the file is never read
    whole; the controller's short lines for unchanged ports are expanded)."""
    return expand(read_jsonl(Path(telemetry_file)))


def uplink_imbalance(samples: Iterable[dict]) -> list[float]:
    """Per sample time and switch: busiest minus idlest uplink utilisation (the uplinks
    of a leaf, of an edge or aggregation switch).

    >>> rows = [{"t": 1, "switch": "l0", "role": "leaf_uplink", "util": u} for u in (0.9, 0.1)]
    >>> uplink_imbalance(rows)
    [0.8]
    """
    scan = _Scan()
    for s in samples:
        scan.imbalance_add(s)
    return scan.imbalance_done()


#: a (time, switch) group of uplink samples is complete once samples this much newer came
GROUP_WINDOW_S = 10.0


@dataclass
class _Role:
    ports: set = field(default_factory=set)
    n: int = 0
    backlog_sum: float = 0.0
    backlog_peak: int = 0
    util_sum: float = 0.0
    util_peak: float = 0.0


@dataclass
class _Scan:
    """One pass over the port samples: everything the summary and the plot need, held in
    memory per port, per role and per sample time, never per sample."""

    times: set = field(default_factory=set)
    roles: dict = field(default_factory=dict)
    first: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    #: (role, t) -> [util sum, count, deepest backlog]
    series: dict = field(default_factory=dict)
    #: open (t, switch) uplink groups -> [max util, min util, count]; closed ones' spread
    groups: dict = field(default_factory=dict)
    spreads: list = field(default_factory=list)
    newest: float = float("-inf")

    def add(self, s: dict) -> None:
        t, role, ifname = s["t"], s["role"], s["ifname"]
        self.times.add(t)
        r = self.roles.get(role)
        if r is None:
            r = self.roles[role] = _Role()
        r.ports.add(ifname)
        r.n += 1
        r.backlog_sum += s["backlog_bytes"]
        r.backlog_peak = max(r.backlog_peak, s["backlog_bytes"])
        r.util_sum += s["util"]
        r.util_peak = max(r.util_peak, s["util"])
        self.first.setdefault(ifname, s["qdisc_drops"])
        self.last[ifname] = s["qdisc_drops"]
        point = self.series.get((role, t))
        if point is None:
            self.series[(role, t)] = [s["util"], 1, s["backlog_bytes"]]
        else:
            point[0] += s["util"]
            point[1] += 1
            point[2] = max(point[2], s["backlog_bytes"])
        self.imbalance_add(s)

    def imbalance_add(self, s: dict) -> None:
        if not s["role"].endswith("_uplink"):
            return
        t, util = s["t"], s["util"]
        g = self.groups.get((t, s["switch"]))
        if g is None:
            self.groups[(t, s["switch"])] = [util, util, 1]
        else:
            g[0], g[1], g[2] = max(g[0], util), min(g[1], util), g[2] + 1
        if t > self.newest + GROUP_WINDOW_S / 2:  # now and then, close the old groups
            self.newest = t
            self._close(lambda key: key[0] < t - GROUP_WINDOW_S)

    def _close(self, done) -> None:
        for key in [k for k in self.groups if done(k)]:
            hi, lo, n = self.groups.pop(key)
            if n > 1:
                self.spreads.append(round(hi - lo, 4))

    def imbalance_done(self) -> list[float]:
        self._close(lambda key: True)
        return self.spreads


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


def _scan(telemetry_file: Path) -> _Scan:
    scan = _Scan()
    for s in port_samples(telemetry_file):
        scan.add(s)
    return scan


def _summary(scan: _Scan) -> dict:
    if not scan.times:
        return {"samples": 0}
    times = sorted(scan.times)
    out: dict = {"samples": len(times),
                 "interval_ms": (round(1000 * (times[-1] - times[0]) / (len(times) - 1), 1)
                                 if len(times) > 1 else None),
                 "roles": {}}
    for role in ordered_roles(set(scan.roles)):
        r = scan.roles[role]
        out["roles"][role] = {
            "ports": len(r.ports),
            "peak_backlog_bytes": r.backlog_peak,
            "mean_backlog_bytes": round(r.backlog_sum / r.n, 1),
            "mean_util": round(r.util_sum / r.n, 4),
            "peak_util": r.util_peak,
            "qdisc_drops": sum(scan.last[p] - scan.first[p] for p in r.ports),
        }
    imbalance = scan.imbalance_done()
    out["uplink_imbalance"] = {
        "mean": round(mean(imbalance), 4) if imbalance else None,
        "max": max(imbalance) if imbalance else None,
    }
    return out


def summarize(telemetry_file: Path, events_file: Path | None = None) -> dict:
    """Peak and mean queue depth, mean utilisation and drops per port role; uplink imbalance.

    Means are over busy samples too idle ones: every sample of every port of the role.
    Drops are each port's qdisc drop counter at the end minus at the start. With
    ``events_file`` (controller-events.jsonl), also ``controller``: what it did. The
    samples are streamed: memory grows with ports and sample times, not with samples.
    """
    extra = {"controller": controller_actions(events_file)} if events_file else {}
    return {**_summary(_scan(telemetry_file)), **extra}


def _events(variant_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for e in read_jsonl(variant_dir / layout.CONTROLLER_EVENTS):
        counts[e.get("event", "")] += 1
    return counts


def plot(series: dict[tuple[str, float], list], path: Path, title: str) -> Path | None:
    """Mean utilisation and deepest queue per port role over time, one figure, from the
    per (role, time) points of a scan: [utilisation sum, samples, deepest backlog]."""
    if not series:
        return None
    from testbed.reports.plots import plt, save

    t0 = min(t for _, t in series)
    fig, (ax_u, ax_q) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for role in ordered_roles({r for r, _ in series}):
        ts = sorted(t for r, t in series if r == role)
        x = [t - t0 for t in ts]
        ax_u.plot(x, [series[(role, t)][0] / series[(role, t)][1] for t in ts],
                  label=role.replace("_", " "), lw=1)
        ax_q.plot(x, [series[(role, t)][2] / 1000 for t in ts],
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
    scan = _scan(variant_dir / layout.TELEMETRY)  # one pass for the table and the plot
    summary = _summary(scan)
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
    png = plot(scan.series, variant_dir / layout.TELEMETRY_PLOT, title)
    names = []
    if png:
        rel = (str(png.relative_to(root)) if root is not None
               else f"variants/{variant_dir.name}/{png.name}")
        lines += ["", f"![telemetry {title}]({rel})"]
        names.append(rel)
    return "\n".join(lines) + "\n", names
