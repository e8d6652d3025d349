"""Forwarding plan of one switch, planned on the spec's graph alone.

Pure data, no OpenFlow: the os-ken app turns a :class:`SwitchPlan` into flow mods, and
unit tests check the plan without a switch. Forwarding is by destination IPv4 address
(and ARP target address, so ARP needs no controller either). Every switch gets, for
every host interface of its plane, the set of ports on an equal-cost shortest path to
the switch that serves it (:func:`next_hops`): one port is a plain output, several are
an ECMP set (hashed per flow, see :mod:`controllers.ecmp`). ECMP sets are numbered per
switch from 1 in the order routes first use them, identical member lists sharing one
id, so a leaf of a leaf-spine has exactly one, set 1: its uplinks.

Paths are valley-free where the graph has tiers: up (towards higher tiers, or along
peers) and then down, never down and up again, the way a fat-tree or leaf-spine is
routed. A switch that cannot reach a destination that way (a graph drawn with a valley
in it, or a failure that leaves only a valley) takes plain shortest paths to it, and so
does every switch of a flat graph (one tier). Each hop lowers the distance to the
destination, so no route loops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from topologies.graph import Edge, plane_graph
from topologies.spec import FabricSpec

ECMP_GROUP = 1
PRIORITY_HOST = 100


@dataclass(frozen=True)
class Route:
    """Send traffic for ``ip`` out of ``port``, or hashed over ECMP set ``group``."""

    ip: str
    port: int | None = None
    group: int | None = None


@dataclass
class SwitchPlan:
    """Everything one switch needs: ECMP sets (id -> member ports) and routes."""

    dpid: int
    name: str
    role: str
    groups: dict[int, list[int]] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)

    def members(self, route: Route) -> list[int]:
        """The ports a route may leave by: its port, or its ECMP set's members."""
        return list(self.groups[route.group]) if route.group is not None else [route.port]

    def multipath(self) -> dict[str, list[int]]:
        """Destination address -> its ECMP set, for routes over more than one port."""
        return {r.ip: self.groups[r.group] for r in self.routes
                if r.group is not None and len(self.groups[r.group]) > 1}

    def multipath_ports(self) -> list[int]:
        """Every port that is a member of an ECMP set of more than one port, in order."""
        out: list[int] = []
        for ports in self.multipath().values():
            out += [p for p in ports if p not in out]
        return out

    def set_id(self, ports: list[int]) -> int:
        """The id of the ECMP set with these members, added if new."""
        for gid, members in self.groups.items():
            if members == ports:
                return gid
        gid = max(self.groups, default=0) + 1
        self.groups[gid] = list(ports)
        return gid


# -- equal-cost next hops on the graph --------------------------------------------------------
def _valley_free(graph: nx.Graph, target: str) -> dict[tuple[str, bool], int]:
    """Hops from every (switch, has gone down) state to ``target`` on valley-free paths."""
    if target not in graph:
        return {}
    states = nx.DiGraph()
    tier = nx.get_node_attributes(graph, "tier")
    for u, v in graph.edges():
        for a, b in ((u, v), (v, u)):
            states.add_edge((b, tier[b] < tier[a]), (a, False))  # reversed: towards target
            if tier[b] <= tier[a]:
                states.add_edge((b, True), (a, True))
    states.add_edge("sink", (target, False))
    states.add_edge("sink", (target, True))
    return {s: d - 1 for s, d in nx.single_source_shortest_path_length(states, "sink").items()
            if s != "sink"}


def _plain(graph: nx.Graph, target: str) -> dict[str, list[str]]:
    """Next hops of every switch on plain shortest paths to ``target``."""
    dist = nx.single_source_shortest_path_length(graph, target) if target in graph else {}
    return {s: [n for n in graph[s] if dist.get(n) == dist[s] - 1]
            for s in graph if dist.get(s, 0) > 0}


def _hops(graph: nx.Graph, target: str, sources: set[str], everyone: bool) -> dict[str, list[str]]:
    """Next hops towards ``target``: valley-free where a switch has such a path; else
    plain shortest paths for the switches that need a route (``sources``, the switches
    with hosts, and every switch their plain paths cross), or for all (``everyone``)."""
    tier = nx.get_node_attributes(graph, "tier")
    if len(set(tier.values())) <= 1:
        return _plain(graph, target)
    dist = _valley_free(graph, target)
    out: dict[str, list[str]] = {}
    for s in graph:
        d = dist.get((s, False))
        if d:
            out[s] = [n for n in graph[s] if dist.get((n, tier[n] < tier[s])) == d - 1]
    # a switch without a valley-free path (a valley in the drawing, or a failure) takes
    # plain shortest paths; valley-free paths never lead back to it, so nothing loops
    plain = _plain(graph, target)
    todo = [s for s in (plain if everyone else sources) if s in plain and s not in out]
    while todo:
        s = todo.pop()
        if s in out:
            continue
        out[s] = plain[s]
        todo += [n for n in plain[s] if n in plain and n not in out]
    return out


_CACHE: dict[tuple, tuple[FabricSpec, dict]] = {}


def next_hops(spec: FabricSpec, down: Iterable[Edge] = ()) -> dict[str, dict[str, list[str]]]:
    """Destination switch -> switch -> its next-hop neighbours, on the graph without the
    fabric links in ``down``. With links down, a switch that has no valley-free path
    left and that no switch with hosts needs on its way is absent (it keeps its route:
    on a leaf-spine, the spine whose downlink died; the leaves go round it).

    >>> from topologies.fattree import build_fattree
    >>> spec = build_fattree(prefix="tbdoc0", k=4)
    >>> hops = next_hops(spec)
    >>> p = "tbdoc0p0"
    >>> [n[len(p):] for n in hops[p + "e7"][p + "e0"]]  # edge 0 to pod 3: both aggregations
    ['a0', 'a1']
    >>> [n[len(p):] for n in hops[p + "e7"][p + "a0"]], hops[p + "e7"][p + "c0"]
    (['c0', 'c1'], ['tbdoc0p0a6'])
    """
    down = frozenset(tuple(e) for e in down)
    key = (id(spec), down)
    cached = _CACHE.get(key)
    if cached is not None and cached[0] is spec:
        return cached[1]
    out: dict[str, dict[str, list[str]]] = {}
    for plane in range(spec.planes):
        graph = plane_graph(spec, plane, down)
        sources = {i.switch for i in spec.interfaces(plane)}
        for target in dict.fromkeys(i.switch for i in spec.interfaces(plane)):
            out[target] = _hops(graph, target, sources, everyone=not down)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[key] = (spec, out)
    return out


def port_map(spec: FabricSpec) -> dict[tuple[str, str], list[int]]:
    """(switch, neighbour switch) -> the switch's ports cabled to it, in port order."""
    out: dict[tuple[str, str], list[int]] = {}
    for p in spec.switch_ports():
        if spec.is_switch(p.peer):
            out.setdefault((p.switch, p.peer), []).append(p.port)
    return {k: sorted(v) for k, v in out.items()}


def route_ports(ports: dict[tuple[str, str], list[int]], switch: str, dest: str,
                hops: dict[str, dict[str, list[str]]]) -> list[int]:
    """The ports of ``switch`` towards destination switch ``dest`` (empty: no path), with
    ``ports`` the :func:`port_map` of the spec."""
    return sorted(p for n in hops.get(dest, {}).get(switch, []) for p in ports[(switch, n)])


def plan_switch(spec: FabricSpec, dpid: int) -> SwitchPlan:
    """Compute the forwarding plan of the switch with datapath id ``dpid``.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> leaf = plan_switch(spec, spec.switch("tbdoc0p0l0").dpid)
    >>> leaf.groups
    {1: [3, 4]}
    >>> [(r.ip, r.port, r.group) for r in leaf.routes]
    [('10.0.0.1', 1, None), ('10.0.0.2', 2, None), ('10.0.0.3', None, 1), ('10.0.0.4', None, 1)]
    >>> spine = plan_switch(spec, spec.switch("tbdoc0p0s1").dpid)
    >>> [(r.ip, r.port) for r in spine.routes]
    [('10.0.0.1', 1), ('10.0.0.2', 1), ('10.0.0.3', 2), ('10.0.0.4', 2)]
    """
    switch = spec.switch_by_dpid(dpid)
    plan = SwitchPlan(dpid=dpid, name=switch.name, role=switch.role)
    hops, cabled = next_hops(spec), port_map(spec)
    for intf in spec.interfaces(plane=switch.plane):
        if intf.switch == switch.name:
            plan.routes.append(Route(ip=intf.ip, port=intf.switch_port))
            continue
        ports = route_ports(cabled, switch.name, intf.switch, hops)
        if len(ports) == 1:
            plan.routes.append(Route(ip=intf.ip, port=ports[0]))
        elif ports:
            plan.routes.append(Route(ip=intf.ip, group=plan.set_id(ports)))
    return plan
