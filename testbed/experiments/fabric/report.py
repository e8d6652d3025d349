"""The fabric kind's report section: variants side by side, where the switches dropped
packets, ECN marks, switch telemetry."""

from __future__ import annotations

from pathlib import Path

from testbed.core.layout import run_dir
from testbed.reports import comparison
from testbed.reports import qos as qos_plot
from testbed.reports import telemetry as telemetry_report


def queue_lines(summary: dict) -> list[str]:
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
        lines.append(f"- **{run['name']}**: dropped at {', '.join(parts)}{tail}"
                     f"{unseen_text(run['fabric'].get('unseen_drops'))}.")
    return lines


def unseen_text(unseen: dict | None) -> str:
    """The drops no queue counted (:mod:`testbed.fabric.drops`), as a clause of a sentence.

    (The second example's line is folded here; ``NORMALIZE_WHITESPACE`` joins it.)

    >>> unseen_text({"total": 0, "backlog": 0})
    '; nowhere else'
    >>> counts = {"total": 3, "switch_sockets": 2, "host_udp": 1, "host_ip": 0,
    ...           "interfaces": {}, "backlog": 4}
    >>> print(unseen_text(counts))  # doctest: +NORMALIZE_WHITESPACE
    ; elsewhere 3 (switch processes not reading a port 2, hosts' UDP receive buffers 1);
    host-wide input backlog 4
    >>> unseen_text({"total": 2, "interfaces": {"p0l0e1": 2, "p0l2e3": None}})
    '; elsewhere 2 (interfaces 2)'
    """
    if unseen is None:
        return ""
    # over several seeds an interface that dropped in some of them only has no median
    # (None): counted nowhere, not as 0
    where = [(unseen.get("switch_sockets", 0), "switch processes not reading a port"),
             (sum(v for v in unseen.get("interfaces", {}).values() if v), "interfaces"),
             (unseen.get("host_udp", 0), "hosts' UDP receive buffers"),
             (unseen.get("host_ip", 0), "hosts' IP input"),
             (unseen.get("switch_unsent", 0),
              "frames the switches read that reached no queue (see troubleshooting)")]
    parts = ", ".join(f"{what} {n:,}" for n, what in where if n)
    text = f"; elsewhere {unseen['total']:,} ({parts})" if unseen["total"] else "; nowhere else"
    backlog = unseen.get("backlog", 0)
    return text + (f"; host-wide input backlog {backlog:,}" if backlog else "")


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


def qos_lines(summary: dict, out: Path) -> list[str]:
    """Traffic classes and PFC per variant: per-class drops and peak queue, PAUSE frames,
    pause time, the reaction time measured against the one the headroom assumed, and
    each variant's figure of class queues and paused ports."""
    rows, figures = [], []
    for run in summary["runs"]:
        q = run.get("qos")
        if not q:
            continue
        png = qos_plot.plot(run_dir(run, out), run["name"])
        if png:
            figures.append(f"![classes {run['name']}]({png.relative_to(out)})")
        classes = ", ".join(f"{name} {c['drops']:,} dropped (peak "
                            f"{c['peak_backlog_bytes'] / 1000:.0f} KB)"
                            for name, c in q["per_class"].items())
        line = f"- **{run['name']}**: {classes}"
        if q["pfc"]:
            frames = q["pfc_frames"]
            worst = q["most_paused"][0] if q["most_paused"] else None
            line += (f"; PFC: {frames['xoff_tx']:,} XOFF and {frames['xon_tx']:,} XON sent, "
                     f"{q['paused_s_total']:.1f} s paused over all ports"
                     + (f" (most {worst['port']}, {worst['role'].replace('_', ' ')}, "
                        f"{worst['paused_s']:.1f} s)" if worst else "")
                     + (f"; reaction p99 {q['reaction_p99_sum_ms']} ms (poll + frame + "
                        f"apply) against {q['reaction_assumed_ms']:g} ms assumed by the "
                        "headroom" if q["reaction_p99_sum_ms"] is not None else
                        "; no PAUSE was exchanged"))
            if q.get("agent_error"):
                line += f"; **the PFC agent failed** ({q['agent_error'][0]})"
            if q["watchdog_events"]:
                line += f"; watchdog: {q['watchdog_events']} queues put in drop mode"
        rows.append(line + ".")
    if not rows:
        return []
    rows += tenant_lines(summary)
    departure = next(run["qos"]["departure"] for run in summary["runs"] if run.get("qos"))
    return ["## Traffic classes and PFC", "", *rows, "", f"How this departs from an ASIC: "
            f"{departure}", "", *(f"{f}\n" for f in figures)]


def tenant_lines(summary: dict) -> list[str]:
    """Each tenant's queue and workloads, variant by variant, side by side."""
    rows = []
    for run in summary["runs"]:
        for name, t in ((run.get("qos") or {}).get("tenants") or {}).items():
            c = run["qos"]["per_class"].get(name, {})
            results = []
            if "chains" in t["workloads"] and run["agents"].get("chains_completed"):
                results.append(f"chains p50 {run['agents']['latency_ms']['p50']:.1f} ms, "
                               f"p99 {run['agents']['latency_ms']['p99']:.1f} ms")
            if "training" in t["workloads"] and run["training"].get("iterations"):
                results.append(f"training {run['training']['goodput_mbps']:.1f} Mb/s, "
                               f"{run['training']['packets_lost']:,} lost")
            rows.append(f"| {run['name']} | {name} | {', '.join(t['hosts'])} | "
                        f"{c.get('bytes', 0) / 1e6:,.1f} | {c.get('drops', 0):,} | "
                        f"{c.get('peak_backlog_bytes', 0) / 1000:.0f} | "
                        f"{'; '.join(results) or '-'} |")
    if not rows:
        return []
    return ["", "Tenants (a queue each, matched by their hosts' addresses):", "",
            "| variant | tenant | hosts | MB sent | dropped | peak KB | its workloads |",
            "|---|---|---|---|---|---|---|", *rows]


def telemetry_lines(summary: dict, out: Path) -> list[str]:
    """One telemetry section per variant that recorded port samples."""
    parts = [telemetry_report.section(run_dir(run, out),
                                      run["name"], root=out)[0]
             for run in summary["runs"] if run.get("telemetry", {}).get("samples")]
    parts = [p for p in parts if p]
    return ["## Switch telemetry", "", *parts] if parts else []


def acceptance_lines(summary: dict) -> list[str]:
    """What each variant planted, what acceptance excluded (with why), what moved: a row
    per variant and seed."""
    rows = []
    for run in summary["runs"]:
        for one in run.get("seeds") or [run]:
            acc = one.get("acceptance")
            if not acc:
                continue
            planted = "; ".join(f"{f['action']} {f['target']}" for f in acc.get("planted", []))
            head = f"| {run['name']} | {one.get('seed', run.get('seed'))} | {planted or '-'} |"
            if not acc.get("enabled"):
                rows.append(f"{head} not checked | - | - |")
                continue
            out = [f"{v['name']}: {v['reason']}" for kind in ("links", "switches", "nodes")
                   for v in acc["verdicts"][kind] if v["verdict"] == "excluded"]
            moved = ", ".join(f"{a} -> {b or 'dropped'}"
                              for a, b in (acc.get("moved") or {}).items())
            score = acc.get("score")
            found = (f"; planted found {len(score['found'])}, missed {len(score['missed'])}, "
                     f"beyond them {len(score['extra'])}" if score else "")
            rows.append(f"{head} {acc['seconds']:g} s, system {acc['system']}{found} | "
                        f"{'<br>'.join(out) or 'nothing'} | {moved or '-'} |")
    if not rows:
        return []
    return ["## Acceptance", "",
            "| variant | seed | planted | acceptance | excluded (why) | workloads moved |",
            "|---|---|---|---|---|---|", *rows, ""]


def replacement_lines(summary: dict) -> list[str]:
    """Each node declared degraded during a run: when, why, what moved where, how long
    it took, and the chains that started after it (failed of them)."""
    rows, rule = [], None
    for run in summary["runs"]:
        for one in run.get("seeds") or [run]:
            rep = one.get("replacement")
            if not rep:
                continue
            rule = rule or rep["rule"]
            head = f"| {run['name']} | {one.get('seed', run.get('seed'))} |"
            if not rep["events"]:
                rows.append(f"{head} none of {len(rep['watched'])} | - | - | - | - |")
            for e in rep["events"]:
                took = f"{e['replace_ms']:.0f} ms" if e.get("replace_ms") is not None else "-"
                action = e.get("action", "-")
                if e.get("training_restart_ms") is not None:
                    action += (f" (training again {e['training_restart_ms']:.0f} ms after, "
                               f"from iteration {e['training_from_iteration']})")
                rows.append(f"{head} {e['node']} at {e['declared_s']:.1f} s: {e['reason']} | "
                            f"{action} | {took} | {e.get('chains_after', '-')} | "
                            f"{e.get('chains_failed_after', '-')} |")
    if not rows:
        return []
    return ["## Node health and replacement", "",
            f"Every NIC of the nodes with a role probed to its leaf, {rule['probe_hz']} a "
            f"second; a node is degraded when one NIC loses {rule['loss_max']:.0%} or more "
            f"of its probes, or its median round trip exceeds {rule['latency_max_ms']:g} ms, "
            f"or its error counters rise, in {rule['confirm']} windows of "
            f"{rule['window_s']:g} s in a row.", "",
            "| variant | seed | degraded (why) | action | time to replace | "
            "chains started after | failed of them |",
            "|---|---|---|---|---|---|---|", *rows, ""]


def expansion_lines(summary: dict) -> list[str]:
    """Each rack added during a run: what it added, its acceptance (and what it found
    of the faults planted in it), how soon it carried traffic, what the old fabric's
    probes lost meanwhile."""
    rows = []
    for run in summary["runs"]:
        for one in run.get("seeds") or [run]:
            grown = one.get("expansion")
            if not grown:
                continue
            added = grown.get("added") or {}
            acc = grown.get("acceptance") or {}
            planted = "; ".join(f"{f['action']} {f['target']}" for f in grown.get("planted", []))
            out = acc.get("excluded_links", []) + acc.get("excluded_nodes", []) \
                + acc.get("excluded_switches", [])
            score = grown.get("score")
            found = (f" (planted found {len(score['found'])}, missed {len(score['missed'])}, "
                     f"beyond them {len(score['extra'])})" if score else "")
            routed = grown.get("routed") or {}
            old = grown["old_fabric"]
            rows.append(
                f"| {run['name']} | {one.get('seed', run.get('seed'))} | "
                f"{', '.join(added.get('switches', []))}; {', '.join(added.get('nodes', []))} "
                f"| {planted or '-'} | "
                f"{'accepted' if acc.get('accepted') else 'excluded ' + ', '.join(out)}{found} "
                f"| {routed.get('traffic_after_s', '-')} s | {old['lost']} of {old['sent']} |")
    if not rows:
        return []
    return ["## Racks added during the run", "",
            "Acceptance on the rack alone, then the controller routes it; traffic: from the "
            "rack's verdict until each of its accepted nodes reached the old fabric on every "
            "plane; the old fabric: UDP probes between its first and last leaves' hosts "
            "while the rack was added.", "",
            "| variant | seed | added | planted | rack's acceptance | traffic after | "
            "old fabric's probes lost |", "|---|---|---|---|---|---|---|", *rows, ""]


def report_lines(summary: dict, out: Path) -> list[str]:
    """Markdown lines of the fabric's section (seeds, medians, ratios, drops, marks)."""
    lines = (comparison.section(summary, out) + acceptance_lines(summary)
             + replacement_lines(summary) + expansion_lines(summary))
    queues = queue_lines(summary)
    if queues:
        lines += ["## Where the switches dropped packets", "",
                  "Egress drops per port role (switch buffers are "
                  f"{summary['runs'][0]['fabric'].get('queue_kb', '?')} KB a port), and "
                  "what the kernel dropped elsewhere in the lab in the same window:", "",
                  *queues, ""]
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
    return lines + qos_lines(summary, out) + telemetry_lines(summary, out)
