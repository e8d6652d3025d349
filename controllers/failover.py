"""Failure-aware forwarding plan: recomputed paths and fast-failover groups.

Pure data, like :mod:`controllers.paths` (whose plan it starts from), so it is unit
tested without a switch. Two mechanisms, each switchable:

* **Recompute** (the controller, after a port-status change or a health drain): every
  switch is planned again on the graph without the fabric links in ``down``. An ECMP
  set loses the switch's own dead ports (the hash skips them anyway); a destination
  whose paths changed further away gets a set of its own (say, a leaf sends traffic
  for the leaf behind a dead spine downlink over the other spines only). Where no path
  is left the old route stays: a plan never deletes.
* **Fast failover** (the switches alone, no controller): a route with one next hop
  ``P`` (a switch) goes, for packets arriving on every other port ``Q``, through an
  OpenFlow fast-failover group: primary bucket ``P`` (watch_port), backup "bounce":
  back out of ``Q`` (``IN_PORT``; OpenFlow drops a plain output to the in_port) when
  the neighbour behind ``Q`` is a switch with other next hops towards that
  destination, else a detour: the first hops (other than ``Q``) of the shortest paths
  that avoid the link behind ``P``, if there are any. A
  switch that receives a packet for a destination on a port that is itself in its
  ECMP set for it (a bounced packet) spreads it over the *other* members and
  decrements the IP TTL, so a packet can never circle for ever. On a leaf-spine that
  is what it always was: a spine bounces what its dead downlink cannot take to the
  leaf that sent it, which sends it up again over its other uplinks.

ARP has no TTL, so a bounced ARP packet is marked instead: the switch rewrites its
Ethernet source to ``BOUNCED_MAC`` (hosts learn from the ARP payload, not from that
field) and drops a marked ARP packet that comes back on a port of its ECMP set for
that address: an ARP packet bounces at most once.

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
>>> l0 = spec.switch("tbdoc0p0l0").dpid
>>> plan = plan_failover(spec, l0, down={("tbdoc0p0l1", "tbdoc0p0s1")})
>>> plan.groups
{1: [3, 4], 2: [3]}
>>> [(r.ip, r.port, r.group) for r in plan.routes]
[('10.0.0.1', 1, None), ('10.0.0.2', 2, None), ('10.0.0.3', None, 2), ('10.0.0.4', None, 2)]
>>> s1 = plan_failover(spec, spec.switch("tbdoc0p0s1").dpid, fast_failover=True)
>>> s1.ff_groups == {1001: [(1, 1), (IN_PORT, 2)], 1002: [(2, 2), (IN_PORT, 1)]}
True
>>> s1.ff_routes[:2]
[(2, '10.0.0.1', 1001), (2, '10.0.0.2', 1001)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from controllers.paths import (
    PRIORITY_HOST,
    Route,
    SwitchPlan,
    next_hops,
    plan_switch,
    port_map,
    route_ports,
)
from topologies.graph import Edge, plane_graph
from topologies.spec import FabricSpec

#: fast-failover group ids: FF_GROUP_BASE + 1, + 2, ... in first-use order per switch
FF_GROUP_BASE = 1000
PRIORITY_BOUNCE = PRIORITY_HOST + 10
#: OpenFlow's OFPP_IN_PORT: a bucket that sends the packet back where it came from
IN_PORT = 0xFFFFFFF8

#: Ethernet source of an ARP packet that has been bounced once (locally administered)
BOUNCED_MAC = "02:74:62:ff:ff:ff"


@dataclass(frozen=True)
class Bounce:
    """IPv4 (TTL-1) or ARP (marked) for ``ip`` arriving on ``in_port``, a member of the
    switch's ECMP set for ``ip``, goes back out over ECMP set ``group`` (the others)."""

    in_port: int
    ip: str
    group: int
    arp: bool = False


@dataclass
class FailoverPlan(SwitchPlan):
    """A :class:`SwitchPlan` plus fast-failover groups (id -> buckets of (output port,
    watched port), primary first) with the routes through them, and bounce rules."""

    ff_groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: (in_port, destination ip, fast-failover group)
    ff_routes: list[tuple[int, str, int]] = field(default_factory=list)
    bounces: list[Bounce] = field(default_factory=list)
    #: (in_port, destination ip): a marked (already bounced) ARP packet is dropped
    arp_guards: list[tuple[int, str]] = field(default_factory=list)

    def bounce_members(self, bounce: Bounce) -> list[int]:
        return list(self.groups[bounce.group])


def link_edges(spec: FabricSpec) -> dict[tuple[str, int], Edge]:
    """Every switch port of a fabric link -> that link's (a, b) (a the lower tier)."""
    out: dict[tuple[str, int], Edge] = {}
    for lk in spec.links:
        if lk.kind == "fabric":
            out[(lk.a, lk.a_port)] = (lk.a, lk.b)
            out[(lk.b, lk.b_port)] = (lk.a, lk.b)
    return out


def plan_failover(spec: FabricSpec, dpid: int, *, down: Iterable[Edge] = (),
                  fast_failover: bool = False) -> FailoverPlan:
    """The plan of switch ``dpid`` avoiding the fabric links in ``down``.

    With nothing down and fast failover off this is exactly :func:`plan_switch`, so a
    controller that never sees a failure installs what it always did.
    """
    down = {tuple(e) for e in down}
    base = plan_switch(spec, dpid)
    plan = FailoverPlan(dpid=base.dpid, name=base.name, role=base.role,
                        groups={g: list(p) for g, p in base.groups.items()},
                        routes=list(base.routes))
    if down:
        _recompute(spec, plan, base, down)
    if fast_failover:
        _fast_failover(spec, plan, base)
        _bounces(plan, base)
    return plan


def _recompute(spec: FabricSpec, plan: FailoverPlan, base: SwitchPlan,
               down: set[Edge]) -> None:
    me = plan.name
    edges = link_edges(spec)
    dead = {port for (sw, port), edge in edges.items() if sw == me and edge in down}
    for gid, members in base.groups.items():  # the hash skips them anyway: say so
        plan.groups[gid] = [p for p in members if p not in dead] or list(members)
    hops, cabled = next_hops(spec, down), port_map(spec)
    serving = {i.ip: i.switch for i in spec.interfaces(spec.switch(me).plane)}
    routes = []
    for route in base.routes:
        dest = serving[route.ip]
        ports = route_ports(cabled, me, dest, hops) if dest != me else []
        if not ports or plan.members(route) == ports:
            routes.append(route)  # no path left (keep the old one), or unchanged
        elif route.group is None and len(ports) == 1:
            routes.append(Route(ip=route.ip, port=ports[0]))
        else:
            routes.append(Route(ip=route.ip, group=plan.set_id(ports)))
    plan.routes = routes


def _fast_failover(spec: FabricSpec, plan: FailoverPlan, base: SwitchPlan) -> None:
    """Groups for every single-next-hop route over a fabric port, from the intact graph
    (the switches repair locally; these never change)."""
    me = spec.switch(plan.name)
    hops, cabled = next_hops(spec), port_map(spec)
    peers = {p.port: p.peer for p in spec.switch_ports() if p.switch == me.name}
    serving = {i.ip: i.switch for i in spec.interfaces(me.plane)}
    graph = plane_graph(spec, me.plane)
    ids: dict[tuple, int] = {}
    for route in base.routes:
        primary = route.port
        if primary is None or not spec.is_switch(peers[primary]):
            continue  # an ECMP set repairs itself (the hash skips dead ports); a host link
            # has no other way
        dest = serving[route.ip]
        detour = _detour(graph, me.name, peers[primary], dest, cabled)
        for q, neighbour in peers.items():
            if q == primary:
                continue
            if spec.is_switch(neighbour) and len(hops[dest].get(neighbour, [])) > 1:
                backups = [(IN_PORT, q)]  # it has other ways: let it take one
            else:
                backups = [(p, p) for p in detour if p != q]
            if not backups:
                continue
            buckets = ((primary, primary), *backups)
            gid = ids.setdefault(buckets, FF_GROUP_BASE + len(ids) + 1)
            plan.ff_groups[gid] = list(buckets)
            plan.ff_routes.append((q, route.ip, gid))


def _detour(graph: nx.Graph, me: str, neighbour: str, dest: str,
            cabled: dict[tuple[str, str], list[int]]) -> list[int]:
    """First-hop ports of the shortest paths from ``me`` to ``dest`` without the link
    to ``neighbour`` (any path: a detour may need a valley)."""
    if dest == me:
        return []
    graph = graph.copy()
    graph.remove_edge(me, neighbour)
    try:
        dist = nx.single_source_shortest_path_length(graph, dest)
    except nx.NodeNotFound:
        return []
    if me not in dist:
        return []
    return sorted(p for n in graph[me] if dist.get(n) == dist[me] - 1 for p in cabled[(me, n)])


def _bounces(plan: FailoverPlan, base: SwitchPlan) -> None:
    """Packets that come back on a member of the destination's ECMP set go out over the
    others (TTL-1; ARP marked, and dropped when it comes back marked)."""
    for intact in base.routes:
        if intact.group is None or len(base.groups[intact.group]) < 2:
            continue
        now = next(r for r in plan.routes if r.ip == intact.ip)
        for q in base.groups[intact.group]:
            others = ([p for p in plan.members(now) if p != q]
                      or [p for p in plan.groups[intact.group] if p != q]
                      or [p for p in base.groups[intact.group] if p != q])
            gid = plan.set_id(others)
            plan.bounces.append(Bounce(in_port=q, ip=intact.ip, group=gid))
            plan.bounces.append(Bounce(in_port=q, ip=intact.ip, group=gid, arp=True))
            plan.arp_guards.append((q, intact.ip))
