"""Failure-aware forwarding plan: recomputed paths and fast-failover groups.

Pure data, like :mod:`controllers.paths` (whose plan it starts from), so it is unit
tested without a switch. Two mechanisms, each switchable:

* **Recompute** (the controller, after a port-status change or a health drain): a
  leaf-spine edge in ``down`` is avoided by every leaf. The leaf next to it drops the
  spine from its ECMP set; every *other* leaf sends traffic for the leaf behind the
  edge through a per-destination ECMP set without that spine, because the spine could
  only drop it.
* **Fast failover** (the switches alone, no controller): a spine forwards each
  destination through an OpenFlow fast-failover group, primary bucket the downlink
  (watch_port), backup bucket "bounce": back out of the port the packet came in on
  (``IN_PORT``: the leaf that sent it; OpenFlow drops a plain output to the in_port).
  A leaf that receives, from an uplink, a packet for a host it does not serve sends it
  up again over its *other* uplinks (an ECMP set without the in_port's spine) and
  decrements the IP TTL, so a packet can never circle for ever. That repairs a dead
  spine downlink locally; the leaf's own dead uplink is already left out by the ECMP
  hash, which only picks live members (:mod:`controllers.ecmp`).

ARP has no TTL, so a bounced ARP packet is marked instead: the leaf rewrites its
Ethernet source to ``BOUNCED_MAC`` (hosts learn from the ARP payload, not from that
field) and a leaf drops a marked ARP packet that comes down from a spine for a host it
does not serve: an ARP packet bounces at most once.

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
>>> l0 = spec.switch("tbdoc0p0l0").dpid
>>> plan = plan_failover(spec, l0, down={("tbdoc0p0l1", "tbdoc0p0s1")})
>>> plan.groups
{1: [3, 4], 11: [3]}
>>> [(r.ip, r.port, r.group) for r in plan.routes]
[('10.0.0.1', 1, None), ('10.0.0.2', 2, None), ('10.0.0.3', None, 11), ('10.0.0.4', None, 11)]
>>> s1 = plan_failover(spec, spec.switch("tbdoc0p0s1").dpid, fast_failover=True)
>>> s1.ff_groups == {1001: [(2, 2), (IN_PORT, 1)], 1002: [(1, 1), (IN_PORT, 2)]}
True
>>> s1.ff_routes[:2]
[(2, '10.0.0.1', 1002), (2, '10.0.0.2', 1002)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controllers.paths import ECMP_GROUP, PRIORITY_HOST, Route, SwitchPlan, plan_switch
from topologies.spec import FabricSpec

#: leaf ECMP set for destinations behind leaf i (without spines that cannot reach it)
DEST_GROUP_BASE = 10
#: spine fast-failover group for traffic from leaf i to leaf j: FF_GROUP_BASE + i * n + j
FF_GROUP_BASE = 1000
#: leaf ECMP set that bounces traffic back up without spine i
BOUNCE_GROUP_BASE = 40
PRIORITY_BOUNCE = PRIORITY_HOST + 10
#: OpenFlow's OFPP_IN_PORT: a bucket that sends the packet back where it came from
IN_PORT = 0xFFFFFFF8

Edge = tuple[str, str]  # (leaf name, spine name)


#: Ethernet source of an ARP packet that has been bounced once (locally administered)
BOUNCED_MAC = "02:74:62:ff:ff:ff"


@dataclass(frozen=True)
class Bounce:
    """At a leaf: IPv4 (TTL-1) or ARP (marked) for ``ip`` arriving on uplink ``in_port``
    goes back up over ECMP set ``group``."""

    in_port: int
    ip: str
    group: int
    arp: bool = False


@dataclass
class FailoverPlan(SwitchPlan):
    """A :class:`SwitchPlan` plus a spine's fast-failover groups (id -> buckets of
    (output port, watched port), primary first) and routes, and a leaf's bounce rules."""

    ff_groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: (in_port, destination ip, fast-failover group) at a spine
    ff_routes: list[tuple[int, str, int]] = field(default_factory=list)
    bounces: list[Bounce] = field(default_factory=list)
    #: (uplink, remote host address): a marked (already bounced) ARP packet is dropped
    arp_guards: list[tuple[int, str]] = field(default_factory=list)


def uplink_edges(spec: FabricSpec) -> dict[tuple[str, int], Edge]:
    """Every switch port that belongs to a leaf-spine link -> that link's (leaf, spine)."""
    out: dict[tuple[str, int], Edge] = {}
    for lk in spec.links:
        if lk.kind == "fabric":
            out[(lk.a, lk.a_port)] = (lk.a, lk.b)
            out[(lk.b, lk.b_port)] = (lk.a, lk.b)
    return out


def _leaves(spec: FabricSpec, plane: int) -> list[str]:
    return [s.name for s in spec.switches if s.role == "leaf" and s.plane == plane]


def _uplinks(spec: FabricSpec, leaf: str) -> list[tuple[str, int]]:
    """(spine, leaf port) of every uplink of ``leaf``, in spine order."""
    return [(lk.b, lk.a_port) for lk in spec.links if lk.kind == "fabric" and lk.a == leaf]


def plan_failover(spec: FabricSpec, dpid: int, *, down: Iterable[Edge] = (),
                  fast_failover: bool = False) -> FailoverPlan:
    """The plan of switch ``dpid`` avoiding the leaf-spine edges in ``down``.

    With nothing down and fast failover off this is exactly :func:`plan_switch`, so a
    controller that never sees a failure installs what it always did.
    """
    down = set(down)
    base = plan_switch(spec, dpid)
    plan = FailoverPlan(dpid=base.dpid, name=base.name, role=base.role,
                        groups=dict(base.groups), routes=list(base.routes))
    switch = spec.switch_by_dpid(dpid)
    leaf_of = {i.ip: i.switch for i in spec.interfaces(plane=switch.plane)}
    if switch.role == "leaf":
        _plan_leaf(spec, plan, leaf_of, down, fast_failover)
    elif fast_failover:
        _plan_spine(spec, plan, leaf_of)
    return plan


def _plan_leaf(spec: FabricSpec, plan: FailoverPlan, leaf_of: dict[str, str],
               down: set[Edge], fast_failover: bool) -> None:
    me = plan.name
    uplinks = _uplinks(spec, me)
    if not uplinks:
        return
    mine = [port for spine, port in uplinks if (me, spine) not in down]
    plan.groups[ECMP_GROUP] = mine or [port for _, port in uplinks]
    index = {leaf: i for i, leaf in enumerate(_leaves(spec, spec.switch(me).plane))}
    routes = []
    for route in plan.routes:
        dest = leaf_of[route.ip]
        if route.group is None or dest == me:
            routes.append(route)
            continue
        usable = [port for spine, port in uplinks
                  if (me, spine) not in down and (dest, spine) not in down]
        if not usable or usable == plan.groups[ECMP_GROUP]:
            routes.append(route)
            continue
        gid = DEST_GROUP_BASE + index[dest]
        plan.groups[gid] = usable
        routes.append(Route(ip=route.ip, group=gid))
    plan.routes = routes
    if fast_failover and len(uplinks) > 1:
        spines = [s.name for s in spec.switches
                  if s.role == "spine" and s.plane == spec.switch(me).plane]
        remote = [r.ip for r in plan.routes if leaf_of[r.ip] != me]
        for spine, port in uplinks:
            others = [p for s, p in uplinks if s != spine and (me, s) not in down]
            gid = BOUNCE_GROUP_BASE + spines.index(spine)
            plan.groups[gid] = others or [p for s, p in uplinks if s != spine]
            for ip in remote:
                plan.bounces.append(Bounce(in_port=port, ip=ip, group=gid))
                plan.bounces.append(Bounce(in_port=port, ip=ip, group=gid, arp=True))
                plan.arp_guards.append((port, ip))


def _plan_spine(spec: FabricSpec, plan: FailoverPlan, leaf_of: dict[str, str]) -> None:
    me = plan.name
    leaves = _leaves(spec, spec.switch(me).plane)
    ports = {leaf: spec.port_to(me, leaf) for leaf in leaves}
    n = len(leaves)
    # one group per (from leaf, to leaf): primary the downlink, backup back to the leaf
    # the packet came from (watching that port: OpenFlow wants a watch in every bucket)
    for i, src in enumerate(leaves):
        for j, dst in enumerate(leaves):
            if i != j:
                plan.ff_groups[FF_GROUP_BASE + i * n + j] = [
                    (ports[dst], ports[dst]), (IN_PORT, ports[src])]
    for r in plan.routes:
        j = leaves.index(leaf_of[r.ip])
        for i, src in enumerate(leaves):
            if i != j:
                plan.ff_routes.append((ports[src], r.ip, FF_GROUP_BASE + i * n + j))
