"""Two results folders side by side: ``testbed compare BEFORE AFTER``.

For every variant both summaries have, the headline figures of its kind (chains and
their latency, training goodput and iterations, elephant throughput, checkpoint write
and replication lag, fault repair, backbone failover, MACsec throughput and attack
counters) with the ratio after/before. Used to show that a change
of structure did not change results (run-to-run noise is the yardstick: compare two
runs of the same code too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from testbed.core import layout
from testbed.errors import ConfigError


def _get(d: dict | None, path: str):
    for part in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


RUN_FIGURES = [
    ("chains ok", "agents.chains_completed"),
    ("chains failed", "agents.chains_failed"),
    ("chain p50 ms", "agents.latency_ms.p50"),
    ("chain p99 ms", "agents.latency_ms.p99"),
    ("train Mb/s", "training.goodput_mbps"),
    ("iter p50 ms", "training.iteration_ms.p50"),
    ("pkts lost", "training.packets_lost"),
    ("bulk Mb/s", "bulk.goodput_mbps"),
    ("elephants Mb/s", "elephants.aggregate_mbps"),
    ("elephants/NICs", "elephants.of_nics"),
    ("ckpt write p50 ms", "checkpoints.write_ms.p50"),
    ("ckpt write p99 ms", "checkpoints.write_ms.p99"),
    ("ckpt lag p50 ms", "checkpoints.lag_ms.p50"),
    ("ckpt lag p99 ms", "checkpoints.lag_ms.p99"),
    ("ckpts lost", "checkpoints.lost"),
]


def figures(summary: dict) -> Iterator[tuple[str, str, float | None]]:
    """(variant, figure, value) of everything worth comparing in one summary."""
    for run in summary["runs"]:
        for label, path in RUN_FIGURES:
            value = _get(run, path)
            if value is not None and not (label.startswith("train") and not
                                          _get(run, "training.iterations")):
                yield run["name"], label, value
        for i, f in enumerate(run.get("faults", [])):
            tag = f"fault{i} {f['fault']} {f['target']}"
            for key in ("repair_ms", "lost_packets", "chains_failed", "training_recovery_ms"):
                yield run["name"], f"{tag} {key}", f.get(key)
        for f in run.get("failovers", []):
            for key in ("detect_ms", "restore_ms", "lost_packets"):
                yield run["name"], f"{f['fault']} {key}", f.get(key)
    macsec = summary.get("macsec")
    if macsec:
        yield "macsec", "throughput ratio", macsec["throughput_mbps"].get("ratio")
        for key, value in macsec["attack"]["counters_b"].items():
            yield "macsec", f"b {key}", value


def _fmt(v, flagged: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):  # a fraction keeps three digits: 0.978, not 1.0
        text = f"{v:.3g}" if 0 < abs(v) < 1 else f"{v:,.1f}"
    else:
        text = f"{v:,}"
    return text + " (F)" if flagged else text


def flagged(summary: dict) -> set[str]:
    """The variants whose run the fidelity monitor flagged (any seed): the host did not
    keep up, so their figures measure the host, not the lab."""
    return {run["name"] for run in summary["runs"]
            if not (run.get("fidelity") or {}).get("ok", True)}


#: the footnote of a table with a flagged figure in it
FLAG_NOTE = ("(F): the fidelity monitor flagged that variant's run (the host did not keep "
             "up): the figure measures the host, not the lab")


def table(before: dict, after: dict) -> str:
    a = {(v, f): x for v, f, x in figures(before)}
    b = {(v, f): x for v, f, x in figures(after)}
    fa, fb = flagged(before), flagged(after)
    rows = [("variant", "figure", "before", "after", "after/before")]
    for key in [k for k in a if k in b]:
        x, y = a[key], b[key]
        ratio = f"{y / x:.2f}" if isinstance(x, int | float) and isinstance(y, int | float) \
            and x else "-"
        rows.append((key[0], key[1], _fmt(x, key[0] in fa), _fmt(y, key[0] in fb), ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any("(F)" in c for r in rows[1:] for c in r[2:4]):
        lines.append(FLAG_NOTE)
    return "\n".join(lines)


def cmd_compare(args) -> int:
    """``testbed compare BEFORE AFTER``: one line a variant's figure, with the ratio."""
    summaries = []
    for field, folder in (("BEFORE", args.before), ("AFTER", args.after)):
        path = Path(folder) / layout.SUMMARY
        try:
            summaries.append(json.loads(path.read_text()))
        except OSError as exc:
            raise ConfigError(field, f"{path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(field, f"{path}: not JSON ({exc})") from None
    before, after = summaries
    print(f"{before.get('scenario', '?')}: {args.before} -> {args.after}")
    print(table(before, after))
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("compare", help="two results folders side by side: each variant's "
                                       "headline figures and their ratio")
    p.add_argument("before", help="the first results folder (its summary.json)")
    p.add_argument("after", help="the second results folder")
    p.set_defaults(func=cmd_compare)
