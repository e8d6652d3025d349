"""Forwarding plan of one switch, computed from the topology spec alone.

Pure data, no OpenFlow: the os-ken app turns a :class:`SwitchPlan` into flow and group
mods, and unit tests check the plan without a switch. Forwarding is by destination IPv4
address (and ARP target address, so ARP needs no controller either): a leaf delivers to
its own hosts and spreads everything else over its uplinks (an ECMP set, hashed per
flow, see :mod:`controllers.ecmp`); a spine sends each address down to the leaf that
serves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    interfaces = spec.interfaces(plane=switch.plane)
    if switch.role == "leaf":
        uplinks = spec.uplink_ports(switch.name)
        if uplinks:
            plan.groups[ECMP_GROUP] = uplinks
        for intf in interfaces:
            if intf.switch == switch.name:
                plan.routes.append(Route(ip=intf.ip, port=intf.switch_port))
            elif uplinks:
                plan.routes.append(Route(ip=intf.ip, group=ECMP_GROUP))
    else:
        for intf in interfaces:
            plan.routes.append(Route(ip=intf.ip, port=spec.port_to(switch.name, intf.switch)))
    return plan
