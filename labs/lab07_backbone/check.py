"""Lab 7 checks: backbone design and failover (``testbed check 7 RESULTS``).

Grades a results folder of ``labs/lab07_backbone/*/backbone.yaml``. The design is
rebuilt from summary.json and judged by the project's own design check
(:func:`topologies.backbone_check.design_check`: link- and risk-group-disjoint paths);
the failover figures are the ones the run measured from its probes.
"""

from __future__ import annotations

import json
import time

from testbed.lab.live import wait_until
from testbed.reports.grading import Missing, Results, Verdict, failed, passed, verdict
from testbed.reports.live_checks import NotApplicable
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


# -- live checks: ``testbed check 7 --lab NAME`` on a running lab (testbed up) ----------
#: the scenario the starter and the solution build (a lab of another is refused)
SCENARIO = "lab07-backbone"
#: seconds a cut risk group is given to be routed around (the 300 ms target is the run's
#: to measure: a round of probes takes about a second here)
REROUTE_WAIT_S = 30.0
#: seconds the sessions are given to come back after the group is restored
HEAL_WAIT_S = 90.0
#: seconds a session that is down is given to come back before it counts as missing
SESSION_WAIT_S = 15.0


def _prefixes(live) -> dict[str, str]:
    """Every destination a router must route: other routers' loopbacks, regions' sites."""
    out = {}
    for node in live.routers():
        out[live.address(node, "lo")] = f"{node} loopback"
        site = live.address(node, "site0")
        if site:
            out[site.rsplit(".", 1)[0] + ".0/24"] = f"{node} site"
    return out


def _missing_routes(live) -> dict[str, list[str]]:
    want = _prefixes(live)
    out = {}
    for node in live.routers():
        have = {str(r.get("dst", "")).removesuffix("/32") for r in live.routes(node)}
        own = {live.address(node, "lo")}
        site = live.address(node, "site0")
        if site:
            own.add(site.rsplit(".", 1)[0] + ".0/24")
        missing = [what for dst, what in want.items() if dst not in have and dst not in own]
        if missing:
            out[node] = missing
    return out


def every_router_routes_everywhere(live) -> Verdict:
    """Every router (PoP and region) holds a route to every other router's loopback and
    every region's site (its kernel table, as FRR installed it; 15 s to be complete)."""
    missing: dict[str, list[str]] = {}

    def complete() -> bool:
        missing.clear()
        missing.update(_missing_routes(live))
        return not missing

    wait_until(complete, SESSION_WAIT_S, step=1.0)  # a route a flap took comes back
    routers = live.routers()
    shown = "; ".join(f"{n} lacks {', '.join(m[:3])}" + (f" and {len(m) - 3} more"
                                                          if len(m) > 3 else "")
                      for n, m in list(missing.items())[:4])
    return verdict(not missing, shown or f"each of {len(routers)} routers routes all "
                                         f"{len(_prefixes(live)) - 1} other destinations")


def _links_up(live) -> set[str]:
    """The backbone's links whose two ends hold a Full OSPF adjacency (or an Established
    BGP session) over them, from each router's vtysh."""
    full: dict[str, set[str]] = {}
    for node in live.routers():
        nbrs = live.vtysh_json(node, "show ip ospf neighbor json") or {}
        full[node] = {str(n.get("ifaceName", "")).split(":")[0]
                      for entries in (nbrs.get("neighbors") or {}).values() for n in entries
                      if str(n.get("nbrState", "")).startswith("Full")}
        if not nbrs.get("neighbors"):  # a BGP backbone: sessions by peer address
            summary = live.vtysh_json(node, "show bgp ipv4 unicast summary json") or {}
            full[node] |= {f"peer {addr}" for addr, p in (summary.get("peers") or {}).items()
                           if p.get("state") == "Established"}
    up = set()
    for link, ends in live.record["links"].items():
        i = live.link_index(link)
        if all(live.link_ifname(link, s) in full.get(ends[s], set()) or
               f"peer 10.1.{i}.{2 if s == 'a' else 1}" in full.get(ends[s], set())
               for s in "ab"):
            up.add(link)
    return up


def _links_cut(live) -> set[str]:
    """The backbone's links with an end whose interface is down (cut: no session can come
    up over it while it stays so), from each router's ``ip -j link``."""
    down: set[str] = set()
    for node in live.routers():
        done = live.run(node, ["ip", "-j", "link", "show"])
        if done.returncode:
            continue
        down |= {x.get("ifname") for x in json.loads(done.stdout or "[]")
                 if x.get("operstate") not in ("UP", "UNKNOWN")}
    return {link for link in live.record["links"]
            if any(live.link_ifname(link, s) in down for s in "ab")}


def _links_settled(live) -> set[str]:
    """The links :func:`_links_up` finds up, asked again for up to :data:`SESSION_WAIT_S`
    while one whose two ends are up is missing: a link counts once its session was seen
    up (a session that flaps on a loaded host is seen; one a cut, the design or the
    configuration takes away is not, and a link cut when the check begins is not waited
    for)."""
    if "lab7-links" in live.memo:  # seen by the check before this one, same grading
        return set(live.memo["lab7-links"])
    seen: set[str] = set()
    awaited = set(live.record["links"]) - _links_cut(live)

    def all_seen() -> bool:
        seen.update(_links_up(live))
        return seen >= awaited

    wait_until(all_seen, SESSION_WAIT_S, step=1.0)
    live.memo["lab7-links"] = set(seen)
    return seen


def _live_design(live, up: set[str]) -> Backbone:
    """The scenario's backbone cut down to the links whose sessions are up."""
    from dataclasses import replace

    bb = live.loaded.experiment.bb
    groups = [replace(g, links=tuple(x for x in g.links if x in up)) for g in bb.risk_groups]
    return replace(bb, links=tuple(lk for lk in bb.links if lk.name in up),
                   regions=tuple(replace(r, pops=tuple(p for p in r.pops
                                                       if f"{r.name}-{p}" in up))
                                 for r in bb.regions),
                   risk_groups=tuple(g for g in groups if g.links))


def sessions_on_every_link(live) -> Verdict:
    """Every link of the design carries a routing session up at both ends (OSPF Full, or
    BGP Established; one that is down is given 15 s to be seen up)."""
    up = _links_settled(live)
    down = sorted(set(live.record["links"]) - up)
    return verdict(not down, f"no session on {', '.join(down)}" if down else
                   f"sessions up on all {len(up)} links")


def separate_paths_in_sessions(live) -> Verdict:
    """The design rule on what the routers run: over the links whose sessions are up,
    every PoP has 4 separate paths (no shared link or risk group) to >= 2 PoPs and every
    region is homed to 2 PoPs."""
    up = _links_settled(live)
    try:
        check = design_check(_live_design(live, up))
    except DesignLimit as exc:
        return failed(f"the design check does not take this design: {exc}")
    if not check.ok:
        return failed(f"over the {len(up)} links with sessions up: " + "; ".join(check.errors))
    fewest = min(len(e["peers"]) for e in check.pops.values())
    return passed(f"over the {len(up)} links with sessions up, every PoP reaches >= "
                  f"{fewest} PoPs over {PATHS} separate paths; every region dual-homed")


def _regions_unreachable(live) -> list[str]:
    """Region pairs whose probes (site address to site address) got no answer."""
    sites = {n: live.address(n, "site0") for n in live.routers() if live.address(n, "site0")}
    answers = live.probes([(src, [a for n, a in sites.items() if n != src], addr)
                           for src, addr in sites.items()])
    return [f"{src}>{n}" for src, answered in zip(sites, answers, strict=True)
            for n, a in sites.items() if n != src and not answered[a]]


def _routes_over(live, ifnames: set[str]) -> list[str]:
    """Routes (router: destination) that still leave over one of ``ifnames``."""
    out = []
    for node in live.routers():
        for r in live.routes(node):
            devs = {r.get("dev")} | {h.get("dev") for h in r.get("nexthops") or ()}
            if devs & ifnames and r.get("protocol") not in ("kernel",):
                out.append(f"{node}: {r.get('dst')}")
    return out


def _group_target(live) -> str:
    """The risk group the variant's own schedule cuts, else the backbone's first."""
    for fault in live.loaded.experiment.cfg.get("faults") or ():
        if fault.get("action") == "cut_risk_group":
            return fault["target"]
    groups = [g.name for g in live.loaded.experiment.bb.risk_groups if g.links]
    if not groups:
        raise NotApplicable("the backbone has no risk group to cut")
    return groups[0]


def risk_group_rerouted(live) -> Verdict:
    """A risk group is cut on the running backbone (testbed fault cut_risk_group): within
    30 s every region pair answers again and no route leaves over a cut link; then the
    group is restored."""
    before: list[str] = []

    def reachable() -> bool:
        before[:] = _regions_unreachable(live)
        return not before

    if wait_until(reachable, SESSION_WAIT_S, step=1.0) is None:
        return failed(f"before the cut, region pairs gave no answer: {', '.join(before[:4])}")
    group = _group_target(live)
    links = live.loaded.experiment.bb.group(group).links
    ifnames = {live.link_ifname(lk, s) for lk in links for s in "ab"}
    last: list[list[str]] = [[]]

    def rerouted() -> bool:
        last[0] = _regions_unreachable(live) + _routes_over(live, ifnames)
        return not last[0]

    live.fault("cut_risk_group", group)
    try:
        took = wait_until(rerouted, REROUTE_WAIT_S, step=0.2)
    finally:
        live.fault("restore_risk_group", group)
        healed = wait_until(lambda: set(links) <= _links_up(live), HEAL_WAIT_S, step=1.0)
    after = "" if healed is not None else (f"; {HEAL_WAIT_S:.0f} s after the restore the "
                                           "sessions on it were not all back")
    if took is None:
        return failed(f"{group} ({', '.join(links)}) cut: after {REROUTE_WAIT_S:.0f} s "
                      f"still {', '.join(last[0][:4])}{after}")
    return passed(f"{group} ({', '.join(links)}) cut: every region pair answered and no "
                  f"route used it {took:.1f} s later (probe rounds; the run's restore_ms "
                  f"measures the 300 ms target); restored{after}")


def macsec_counters_grow(live) -> Verdict:
    """With MACsec on, every backbone link end protects what it sends and validates what
    it receives: its SecY's OutPktsProtected/Encrypted and InPktsOK grow over 3 s of
    probes (hellos and BFD alone cross every link)."""
    first = live.macsec_counters()
    if first is None:
        raise NotApplicable("MACsec is off in this backbone (backbone.macsec.enabled)")
    _regions_unreachable(live)
    time.sleep(3.0)  # the window the counters are compared over, not a wait for a state
    second = live.macsec_counters()
    out = ("OutPktsProtected", "OutPktsEncrypted")
    still = []
    for link, ends in second.items():
        for side, now in ends.items():
            was = first.get(link, {}).get(side, {})
            sent = sum(now.get(k, 0) for k in out) - sum(was.get(k, 0) for k in out)
            ok = now.get("InPktsOK", 0) - was.get("InPktsOK", 0)
            if sent <= 0 or ok <= 0:
                still.append(f"{link}:{side} (+{sent} protected, +{ok} InPktsOK, "
                             f"{now.get('InPktsNotValid', 0)} not valid)")
    ends = sum(len(e) for e in second.values())
    return verdict(not still, f"counters still on {', '.join(still[:4])}" if still else
                   f"all {ends} link ends protected what they sent and validated what "
                   "they received")


LIVE = [every_router_routes_everywhere, sessions_on_every_link, separate_paths_in_sessions,
        risk_group_rerouted, macsec_counters_grow]
