"""Lab 7 checks: backbone design and failover (``testbed check 7 RESULTS``).

Grades a results folder of ``labs/lab07_backbone/*/backbone.yaml``. The design is
rebuilt from summary.json and judged by the project's own design check
(:func:`topologies.backbone_check.design_check`: link- and risk-group-disjoint paths);
the failover figures are the ones the run measured from its probes.
"""

from __future__ import annotations

from testbed.reports.grading import Missing, Results, Verdict, failed, passed, verdict
from testbed.reports.predictions import Choice
from topologies.backbone import Backbone, default_backbone
from topologies.backbone_check import PATHS, PEERS, DesignLimit, design_check

RESTORE_MS = 300.0  # every fault routed around within this (the lab's target)
REPLICATION = 0.9   # replication flows keep at least this share of their rate


def _backbone(r: Results) -> dict:
    bb = r.summary.get("backbone")
    if not isinstance(bb, dict) or not bb.get("links"):
        raise Missing("summary.json has no backbone section (is this a backbone run?)")
    return bb


def design(r: Results) -> Backbone:
    """The backbone the run built, rebuilt from summary.json."""
    bb = _backbone(r)
    homes: dict[str, list[str]] = {name: [] for name in bb["regions"]}
    for lk in bb["links"]:
        if lk.get("kind") == "access":
            region, pop = (lk["a"], lk["b"]) if lk["a"] in homes else (lk["b"], lk["a"])
            homes[region].append(pop)
    return Backbone.from_dict({
        "pops": [{"name": p} for p in bb["pops"]],
        "regions": [{"name": n, "pops": p} for n, p in homes.items()],
        "links": bb["links"],
        "risk_groups": [{"name": n, "links": ls} for n, ls in bb["risk_groups"].items()]})


def design_rule(r: Results) -> Verdict:
    """The design rule holds: 4 physically separate paths from every PoP to >= 2 PoPs,
    every region homed to 2 PoPs (recomputed, not read from the run's own verdict)."""
    try:
        check = design_check(design(r))
    except DesignLimit as exc:  # a design larger than any the lab's validation accepts
        return failed(f"the design check does not take this design: {exc}")
    if not check.ok:
        return failed("; ".join(check.errors))
    fewest = min(len(e["peers"]) for e in check.pops.values())
    return passed(f"every PoP reaches >= {fewest} PoPs over {PATHS} separate paths "
                  f"(rule: {PEERS}); every region dual-homed")


def fewer_links(r: Results) -> Verdict:
    """Student task: fewer PoP-PoP links than the default backbone's."""
    mine, ref = len(design(r).links), len(default_backbone().links)
    return verdict(mine < ref, f"{mine} PoP-PoP links against the default's {ref}"
                   + ("" if mine < ref else ": remove at least one (and keep the rule)"))


def _failovers(r: Results) -> list[tuple[str, dict]]:
    out = [(run["name"], f) for run in r.runs() for f in run.get("failovers") or ()]
    if not out:
        raise Missing("summary.json has no failovers (did the fault schedule run?)")
    return out


def every_fault_rerouted(r: Results) -> Verdict:
    """Every fault was applied and every region pair reachable again after it."""
    bad = [f"{v}: {f['fault']} (applied {f.get('ok')}, reachability "
           f"{f.get('reachability_after')})" for v, f in _failovers(r)
           if not f.get("ok") or (f.get("reachability_after") or 0) < 1.0]
    return verdict(not bad, "; ".join(bad) or
                   f"{len(_failovers(r))} faults, every region pair reachable after each")


def restore_within_target(r: Results) -> Verdict:
    """Student task: every fault routed around within 300 ms (restore_ms)."""
    rows, slow = [], []
    for variant, f in _failovers(r):
        ms = f.get("restore_ms")
        rows.append(f"{f['fault']} {'-' if ms is None else f'{ms:.0f}'} ms")
        if ms is None or ms > RESTORE_MS:
            slow.append(f"{variant}: {f['fault']}")
    reason = ", ".join(rows) + f" (limit {RESTORE_MS:.0f} ms)"
    return verdict(not slow, reason if not slow else "too slow: " + "; ".join(slow)
                   + " -- " + reason)


def replication_kept_rate(r: Results) -> Verdict:
    """The replication flows kept >= 90 % of their rate through the faults."""
    flows = [(run["name"], f) for run in r.runs() for f in run.get("replication") or ()]
    if not flows:
        raise Missing("summary.json has no replication flows")
    low = [f"{v}: {f['src']}>{f['dst']} {f.get('goodput_mbps') or 0:.1f} of "
           f"{f['rate_mbps']:g} Mb/s" for v, f in flows
           if (f.get("goodput_mbps") or 0) < REPLICATION * f["rate_mbps"] or f.get("error")]
    return verdict(not low, "; ".join(low) or
                   f"{len(flows)} flows at >= {REPLICATION:.0%} of their rate")


CHECKS = [design_rule, fewer_links, every_fault_rerouted, restore_within_target,
          replication_kept_rate]


FAULTS = ("cut_link", "cut_risk_group", "fail_pop")


def _slowest(r: Results) -> str:
    """The kind of the fault routed around last (never routed around: the slowest of
    all); a failover's ``fault`` is its kind and target (``cut_link nyc-ams``)."""
    times = {f["fault"].split()[0]: f.get("restore_ms") for _, f in _failovers(r)}
    return max(times, key=lambda k: float("inf") if times[k] is None else times[k])


#: the guide's "Predict, then run" question 1 graded against the run (predictions.yaml):
#: the fault slowest to route around, the right choice
PREDICTIONS = [Choice("1", _slowest, FAULTS)]
