"""The backbone kind's report: its section of the Markdown report, its figure and its
terminal table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.core import layout
from testbed.core.layout import MACSEC_KEYS
from testbed.core.layout import run_dir as results_dir
from testbed.experiments.backbone.schema import DELAY_WORDS
from testbed.storage import replication as xregion


def plot(entries: list[dict], out: Path) -> Path:
    """``probe_loss.png``: probe loss over time per variant, faults marked."""
    from testbed.reports.plots import plt, save

    fig, axes = plt.subplots(len(entries), 1, figsize=(10, 2.8 * len(entries)), squeeze=False,
                             sharex=True)
    for ax, entry in zip(axes[:, 0], entries, strict=True):
        data = json.loads((results_dir(entry, out) / entry["loss_timeline"]).read_text())
        xs = [t for t, _ in data["loss"]]
        ys = [100 * v for _, v in data["loss"]]
        ax.plot(xs, ys, lw=1, color="tab:blue")
        for f in entry["failovers"] + entry["restores"]:
            color = "tab:green" if f["action"].startswith("restore") else "tab:red"
            ax.axvline(f["at_s"], color=color, ls="--", lw=0.8)
            ax.annotate(f["fault"], (f["at_s"], 100), rotation=90, fontsize=6, va="top",
                        ha="right", color=color)
        t = entry["timers"]
        ax.set_title(f"{entry['name']}: BFD {t['bfd_ms']} ms x{t['bfd_multiplier']}, "
                     f"hello {t['hello_s']} s / dead {t['dead_s']} s", fontsize=9)
        ax.set_ylabel("probe loss %")
        ax.set_ylim(-2, 102)
    axes[-1, 0].set_xlabel("seconds since probes started (100 ms bins, all region pairs)")
    return save(fig, out / layout.PROBE_LOSS_PLOT)



def macsec_summary(settings: dict, entries: list[dict]) -> dict:
    """``backbone.macsec``: settings, backend, and per variant the counters, CPU, keys."""
    out: dict[str, Any] = {"enabled": settings["enabled"], "cipher": settings["cipher"],
                           "mtu": settings["mtu"], "replay_window": settings["replay_window"]}
    done = [e for e in entries if e.get("macsec")]
    if not done:
        return {**out, "backend": None, "variants": {}}
    out["backend"] = done[0]["macsec"]["backend"]
    out["variants"] = {e["name"]: {k: v for k, v in e["macsec"].items()
                                   if k not in ("backend", "cipher")} for e in done}
    return out


def report_section(backbone: dict, out: Path) -> list[str]:
    """The report's backbone section: design check, one failover table per timer set."""
    check = backbone["design_check"]
    delay = DELAY_WORDS[backbone.get("delay_by", "netem" if backbone["delay_applied"]
                                      else None)]
    lines = ["## Backbone", "",
             f"{len(backbone['pops'])} PoPs, {len(backbone['regions'])} regions, "
             f"{len(backbone['links'])} links; design check "
             f"{'passed' if check['ok'] else 'FAILED'} (every PoP has four link- and "
             "risk-group-disjoint paths to at least two other PoPs; every region is "
             f"dual-homed). Propagation delay {delay}.",
             ""]
    lines += _macsec_lines(backbone.get("macsec"))
    for variant, failovers in backbone["failovers"].items():
        timers = backbone["timers"][variant]
        # with checkpoint modes the variants are named by their mode, not their timers
        word = "" if backbone.get("checkpoints") else " timers"
        lines += [f"### {variant}{word} (BFD {timers['bfd_ms']:g} ms x "
                  f"{timers['bfd_multiplier']:g}, {_protocol(backbone)} hello "
                  f"{timers['hello_s']:g} s / "
                  f"dead {timers['dead_s']:g} s)", "",
                  "| fault | at s | detect ms | restore ms | lost probes | reordered | "
                  "reachability after |",
                  "|---|---|---|---|---|---|---|"]
        for f in failovers:
            lines.append(f"| {f['fault']} | {f['at_s']:g} | {_cell(f['detect_ms'])} | "
                         f"{_cell(f['restore_ms'])} | {f['lost_packets']} | "
                         f"{f['reordered_packets']} | {f['reachability_after']:.2f} |")
        lines.append("")
    if (out / backbone["plot"]).exists():
        lines += [f"![probe loss]({backbone['plot']})", ""]
    lines += xregion.report_lines(backbone.get("checkpoints") or {},
                                      backbone.get("checkpoints_plot"))
    return lines


def _macsec_lines(macsec: dict | None) -> list[str]:
    if not macsec or not macsec.get("enabled"):
        return ["Links are not encrypted (`backbone.macsec` off).", ""]
    lines = [f"Every link is encrypted with MACsec ({macsec['cipher']}, "
             f"{macsec['backend']} backend, protected MTU {macsec['mtu']}); FRR runs on the "
             "protected interfaces, the wires carry only 802.1AE frames. Lab keys per run and "
             f"link are in each variant's `{MACSEC_KEYS}`, readable by its owner alone (mode "
             "0600; `summary.json` names them and holds only each key's fingerprint): share "
             "the results without them.", "",
             "| timers | InPktsOK | InPktsNotValid | InPktsLate | InPktsNoTag | other errors | "
             "forwarder CPU s | wire sample |",
             "|---|---|---|---|---|---|---|---|"]
    bad = ("InPktsInvalid", "InPktsBadTag", "InPktsUnknownSCI", "InPktsNoSCI",
           "InPktsUnusedSA", "InPktsNotUsingSA")
    for name, v in macsec.get("variants", {}).items():
        t = v["totals"]
        ws = v.get("wire_sample") or {}
        sample = "-"
        if ws.get("frames"):
            types = ", ".join(f"{k}: {n}" for k, n in sorted(ws["ethertypes"].items()))
            sample = (f"{ws['frames']} frames on {ws['link']} ({types}); "
                      f"{ws['decrypted']} decrypt with the lab keys")
        cpu = v.get("forwarder_cpu_total_s")
        lines.append(f"| {name} | {t.get('InPktsOK', 0):,} | {t.get('InPktsNotValid', 0)} | "
                     f"{t.get('InPktsLate', 0)} | {t.get('InPktsNoTag', 0)} | "
                     f"{sum(t.get(k, 0) for k in bad)} | "
                     f"{'-' if not v['forwarder_cpu_s'] else f'{cpu:g}'} | {sample} |")
    return [*lines, ""]


def _protocol(backbone: dict) -> str:
    return {"bgpd": "BGP keepalive/hold", "ospfd": "OSPF"}.get(backbone.get("protocol"),
                                                               "OSPF")


def _cell(value: float | None) -> str:
    return "not restored" if value is None else f"{value:,.1f}"


def table(backbone: dict) -> str:
    """Every failover of every timer set, as plain text for the terminal."""
    rows = [("timers", "fault", "detect ms", "restore ms", "lost", "reach after")]
    for variant, failovers in backbone["failovers"].items():
        rows += [(variant, f["fault"], _cell(f["detect_ms"]), _cell(f["restore_ms"]),
                  str(f["lost_packets"]), f"{f['reachability_after']:.2f}") for f in failovers]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    if backbone.get("checkpoints"):
        text += "\n\n" + xregion.table(backbone["checkpoints"])
    return text


