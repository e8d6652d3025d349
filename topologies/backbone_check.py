"""The design rule of the backbone, checked with networkx.

Rule: every PoP has at least ``paths`` (4) physically separate paths to at least
``peers`` (2) other PoPs, and every region is attached to at least two PoPs.

"Physically separate" means the paths share no link and no shared-risk group.
Method (exact, for backbones of a few dozen links): every link maps to its *risk
units*, its own name plus every group that carries it. The PoP-only
``networkx.MultiGraph`` (parallel links are separate edges; regions are not transit)
gives the simple paths from ``p`` to ``q`` (``nx.all_simple_edge_paths``); each path
becomes the set of its units, dominated sets (supersets of another) are dropped, and
a depth-first set packing looks for ``paths`` pairwise disjoint sets. Two fibre pairs
in one cable share that cable's unit and so never count twice. A cheap bound runs
first: a PoP whose links carry fewer than ``paths`` distinct units fails at once.

>>> from topologies.backbone import default_backbone
>>> check = design_check(default_backbone())
>>> check.ok, check.pops["sin"]["peers"][:2], check.pops["sin"]["independent_exits"]
(True, ['ams', 'ash'], 4)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from topologies.backbone import Backbone, Link

PATHS = 4
PEERS = 2
MIN_HOMES = 2


class DesignError(ValueError):
    """The backbone breaks the design rule; ``node`` names the PoP or region."""

    def __init__(self, node: str, reason: str):
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason


@dataclass
class DesignCheck:
    """Outcome of :func:`design_check`: per PoP the peers reached, per region the homes."""

    ok: bool
    pops: dict[str, dict] = field(default_factory=dict)
    regions: dict[str, dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    method: str = ("link- and risk-group-disjoint paths: exact set packing over the "
                   "risk units of simple paths in the PoP multigraph")

    def to_dict(self) -> dict:
        return {"ok": self.ok, "rule": f"{PATHS} separate paths to >= {PEERS} PoPs, "
                f"regions homed to >= {MIN_HOMES} PoPs", "method": self.method,
                "pops": self.pops, "regions": self.regions, "errors": self.errors}


def risk_units(bb: Backbone, link: Link) -> frozenset[str]:
    """The link itself plus every shared-risk group that carries it."""
    return frozenset({"link:" + link.name} | {"srlg:" + g.name for g in bb.groups_of(link.name)})


def pop_graph(bb: Backbone) -> nx.MultiGraph:
    """PoPs as nodes, one edge per PoP-PoP link (key: link name, attribute ``units``)."""
    g = nx.MultiGraph()
    g.add_nodes_from(p.name for p in bb.pops)
    for lk in bb.links:
        g.add_edge(lk.a, lk.b, key=lk.name, units=risk_units(bb, lk))
    return g


def _pack(sets: list[frozenset[str]], want: int) -> int:
    """Most pairwise disjoint sets among ``sets``, searched up to ``want``."""
    best = 0

    def dfs(start: int, used: frozenset[str], count: int) -> bool:
        nonlocal best
        best = max(best, count)
        if best >= want:
            return True
        for i in range(start, len(sets)):
            if not (sets[i] & used) and dfs(i + 1, used | sets[i], count + 1):
                return True
        return False

    dfs(0, frozenset(), 0)
    return best


def separate_paths(g: nx.MultiGraph, p: str, q: str, want: int = PATHS) -> int:
    """Link- and risk-group-disjoint paths ``p`` -> ``q``, counted up to ``want``."""
    sets: set[frozenset[str]] = set()
    for path in nx.all_simple_edge_paths(g, p, q):
        units: frozenset[str] = frozenset()
        for a, b, key in path:
            units |= g.edges[a, b, key]["units"]
        sets.add(units)
    minimal = sorted(sets, key=len)
    kept: list[frozenset[str]] = []
    for s in minimal:
        if not any(k <= s for k in kept):
            kept.append(s)
    return _pack(kept, want)


def design_check(bb: Backbone, paths: int = PATHS, peers: int = PEERS) -> DesignCheck:
    """Check the rule for every PoP and region; never raises (see :func:`require`)."""
    g = pop_graph(bb)
    check = DesignCheck(ok=True)
    for pop in (p.name for p in bb.pops):
        out_units = set()
        for _, _, units in g.edges(pop, data="units"):
            out_units |= units
        groups = {u for u in out_units if u.startswith("srlg:")}
        bare = {u for u in out_units
                if u.startswith("link:") and not any(
                    u[5:] in bb.group(s[5:]).links for s in groups)}
        independent = len(groups) + len(bare)
        counts: dict[str, int] = {}
        if independent >= paths:
            for q in (x.name for x in bb.pops if x.name != pop):
                counts[q] = separate_paths(g, pop, q, paths)
        reached = sorted(q for q, n in counts.items() if n >= paths)
        entry = {"independent_exits": independent, "separate_paths": counts,
                 "peers": reached, "ok": len(reached) >= peers}
        check.pops[pop] = entry
        if not entry["ok"]:
            check.ok = False
            if independent < paths:
                why = (f"PoP {pop} has only {independent} independent exits (links and "
                       f"risk groups), needs {paths} separate paths")
            else:
                why = (f"PoP {pop} reaches {len(reached)} PoP(s) "
                       f"({', '.join(reached) or 'none'}) over {paths} separate paths, "
                       f"needs {peers}")
            check.errors.append(why)
    pop_names = {p.name for p in bb.pops}
    for region in bb.regions:
        homes = sorted(set(region.pops) & pop_names)
        ok = len(homes) >= MIN_HOMES and len(homes) == len(set(region.pops))
        check.regions[region.name] = {"pops": homes, "ok": ok}
        if not ok:
            check.ok = False
            check.errors.append(f"region {region.name} is attached to {len(homes)} known "
                                f"PoP(s) ({', '.join(region.pops)}), needs {MIN_HOMES}")
    return check


def require(bb: Backbone, paths: int = PATHS, peers: int = PEERS) -> DesignCheck:
    """:func:`design_check`, raising :class:`DesignError` naming the first failing node."""
    check = design_check(bb, paths, peers)
    for pop, entry in check.pops.items():
        if not entry["ok"]:
            raise DesignError(pop, next(e for e in check.errors if f"PoP {pop} " in e))
    for region, entry in check.regions.items():
        if not entry["ok"]:
            raise DesignError(region, next(e for e in check.errors if f"region {region} " in e))
    return check
