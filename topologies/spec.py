"""The topology spec: plain data that Mininet, the controller and the reports all read.

A spec is a graph: switches by ``tier`` (0 attaches hosts: a leaf or an edge switch;
1 a spine or aggregation switch; 2 a core switch; explicit graphs may say otherwise)
with a free ``role`` word, hosts with one interface per (plane, rail), and links that
are either ``host`` links (a host interface to a switch port) or ``fabric`` links
(switch to switch, ``a`` the lower-tier end). Builders (:mod:`topologies.build`) make
one; it is serialized to JSON for the controller process and read back with
:func:`FabricSpec.from_dict`.

A port's role follows from the graph: ``{switch role}_{direction}``, the direction
``uplink`` (the neighbour is of a higher tier), ``downlink`` (a lower tier, or a host)
or ``peer`` (the same tier). On a leaf-spine these are ``leaf_uplink``,
``spine_downlink`` and ``leaf_downlink``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from topologies.params import ParamError

IFNAME_MAX = 15  # Linux IFNAMSIZ - 1
#: the tier of switches that attach hosts
EDGE_TIER = 0


class TopologyError(ParamError):
    """A topology parameter is impossible; ``field`` names it."""


@dataclass(frozen=True)
class HostInterface:
    """One NIC port of a node: rail ``rail`` on plane ``plane``, cabled to port
    ``switch_port`` of ``switch``."""

    name: str
    plane: int
    rail: int
    ip: str
    prefixlen: int
    mac: str
    switch: str
    switch_port: int


@dataclass(frozen=True)
class Host:
    """A GPU node: one namespace with one interface per (plane, rail) it is cabled to."""

    name: str
    node: int
    group: int
    interfaces: tuple[HostInterface, ...]

    def interface(self, plane: int, rail: int) -> HostInterface:
        for intf in self.interfaces:
            if intf.plane == plane and intf.rail == rail:
                return intf
        raise KeyError(f"{self.name} has no interface on plane {plane} rail {rail}")

    def interface_by_name(self, name: str) -> HostInterface:
        for intf in self.interfaces:
            if intf.name == name:
                return intf
        raise KeyError(name)


@dataclass(frozen=True)
class Switch:
    """A switch of one plane: its ``tier`` places it in the graph, ``role`` names it
    (leaf, spine, edge, aggregation, core, switch). Rail-optimized leaves say which rail
    and node group they serve."""

    name: str
    role: str
    tier: int
    plane: int
    index: int
    dpid: int
    rail: int | None = None
    group: int | None = None


@dataclass(frozen=True)
class Link:
    """A cable: ``a`` side port ``a_port`` (interface ``a_intf``) to ``b`` side.

    ``kind`` is ``host`` (``a`` a host, ``b`` its switch) or ``fabric`` (switch to
    switch, ``a`` the end of the lower tier)."""

    a: str
    a_port: int
    a_intf: str
    b: str
    b_port: int
    b_intf: str
    mbps: float
    kind: str
    plane: int


@dataclass(frozen=True)
class SwitchPort:
    """One switch port: the link behind it, its rate and its role."""

    switch: str
    port: int
    ifname: str
    mbps: float
    role: str
    #: the node at the other end (a switch or a host)
    peer: str


def direction(mine: int, theirs: int | None) -> str:
    """Direction of a port from its switch's tier and the neighbour's (None: a host).

    >>> direction(0, None), direction(0, 1), direction(1, 0), direction(1, 1)
    ('downlink', 'uplink', 'downlink', 'peer')
    """
    if theirs is None or theirs < mine:
        return "downlink"
    return "uplink" if theirs > mine else "peer"


@dataclass(frozen=True)
class FabricSpec:
    """A fabric as data: hosts, switches by tier, links; ``builder`` made it, with the
    builder's own figures (``leaves_per_plane``, ``k``, ...) in ``params``."""

    prefix: str
    builder: str
    planes: int
    rails: int
    nodes: int
    link_mbps: float
    mtu: int
    queue_kb: int
    delay_ms: float
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...] = field(default_factory=tuple)
    params: dict = field(default_factory=dict)

    # -- lookups -------------------------------------------------------------------
    @cached_property
    def _switch_by_name(self) -> dict[str, Switch]:
        return {sw.name: sw for sw in self.switches}

    def switch(self, name: str) -> Switch:
        return self._switch_by_name[name]

    def is_switch(self, name: str) -> bool:
        return name in self._switch_by_name

    def switch_by_dpid(self, dpid: int) -> Switch:
        for sw in self.switches:
            if sw.dpid == dpid:
                return sw
        raise KeyError(dpid)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def interfaces(self, plane: int | None = None) -> list[HostInterface]:
        return [
            intf
            for h in self.hosts
            for intf in h.interfaces
            if plane is None or intf.plane == plane
        ]

    def uplink_ports(self, switch: str) -> list[int]:
        """Ports of ``switch`` that lead to a higher tier, in link order."""
        return [p.port for p in self.switch_ports()
                if p.switch == switch and p.role.endswith("_uplink")]

    def port_to(self, switch: str, neighbour: str) -> int:
        """The port of ``switch`` cabled to ``neighbour`` (the first, if several)."""
        for p in self.switch_ports():
            if p.switch == switch and p.peer == neighbour:
                return p.port
        raise KeyError(f"no link {switch} -> {neighbour}")

    def counts(self) -> dict[str, int]:
        return {
            "switches": len(self.switches),
            "hosts": len(self.hosts),
            "links": len(self.links),
        }

    # -- ports and their roles -------------------------------------------------------
    @cached_property
    def _switch_ports(self) -> tuple[SwitchPort, ...]:
        def end(switch: str, port: int, ifname: str, peer: str, mbps: float) -> SwitchPort:
            sw = self.switch(switch)
            theirs = self.switch(peer).tier if self.is_switch(peer) else None
            return SwitchPort(switch, port, ifname, float(mbps),
                              f"{sw.role}_{direction(sw.tier, theirs)}", peer)

        ports = [end(lk.b, lk.b_port, lk.b_intf, lk.a, lk.mbps) for lk in self.links]
        ports += [end(lk.a, lk.a_port, lk.a_intf, lk.b, lk.mbps)
                  for lk in self.links if lk.kind == "fabric"]
        return tuple(ports)

    def switch_ports(self) -> list[SwitchPort]:
        """Every switch port: the ``b`` end of every link, then the ``a`` end of every
        fabric link."""
        return list(self._switch_ports)

    def port_roles(self) -> dict[str, str]:
        """Each switch port's role by interface name, e.g. ``leaf_uplink``.

        >>> from topologies.leafspine import build_fabric
        >>> spec = build_fabric(prefix="tbdoc0", nodes=2, leaves_per_plane=1,
        ...                     spines_per_plane=1)
        >>> spec.port_roles()  # doctest: +NORMALIZE_WHITESPACE
        {'tbdoc0p0l0e1': 'leaf_downlink', 'tbdoc0p0l0e2': 'leaf_downlink',
         'tbdoc0p0s0e1': 'spine_downlink', 'tbdoc0p0l0e3': 'leaf_uplink'}
        """
        return {p.ifname: p.role for p in self._switch_ports}

    def roles(self) -> list[str]:
        """The port roles present, leaf-spine order first (uplink, spine downlink, leaf
        downlink), then by tier from the top.

        >>> from topologies.leafspine import build_fabric
        >>> build_fabric(prefix="tbdoc0", nodes=2).roles()
        ['leaf_uplink', 'spine_downlink', 'leaf_downlink']
        """
        return ordered_roles(set(self.port_roles().values()),
                             {sw.role: sw.tier for sw in self.switches})

    # -- serialization -------------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, data: dict) -> FabricSpec:
        hosts = tuple(
            Host(
                name=h["name"],
                node=h["node"],
                group=h["group"],
                interfaces=tuple(HostInterface(**i) for i in h["interfaces"]),
            )
            for h in data["hosts"]
        )
        switches = tuple(Switch(**s) for s in data["switches"])
        links = tuple(Link(**lk) for lk in data["links"])
        scalars = {
            k: v for k, v in data.items() if k not in ("hosts", "switches", "links")
        }
        return cls(hosts=hosts, switches=switches, links=links, **scalars)

    @classmethod
    def from_json(cls, path: Path) -> FabricSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))


#: the leaf-spine's roles, in the order every report has shown them
LEAF_SPINE_ROLES = ("leaf_uplink", "spine_downlink", "leaf_downlink")
_DIRECTIONS = ("uplink", "peer", "downlink")
#: the tier of the builders' role words, for ordering roles without a spec at hand
ROLE_TIERS = {"leaf": 0, "edge": 0, "switch": 0, "spine": 1, "aggregation": 1, "core": 2}


def short(spec: FabricSpec, name: str) -> str:
    """A switch's, host's or interface's name without the fabric's prefix."""
    return name[len(spec.prefix):] if name.startswith(spec.prefix) else name


def link_name(spec: FabricSpec, lk: Link) -> str:
    """Canonical name of a link: its ends' short names, the lower tier first:
    ``p0l0-p0s1`` (a fabric link) or ``n0-p0l0`` (a host link)."""
    return f"{short(spec, lk.a)}-{short(spec, lk.b)}"


def find_link(spec: FabricSpec, target: str) -> Link | None:
    """The link named ``target`` (any accepted form), or None."""
    name = short(spec, str(target))
    for lk in spec.links:
        ends = {short(spec, lk.a), short(spec, lk.b)}
        if "-" in name and set(name.split("-", 1)) == ends:
            return lk
        if name in (short(spec, lk.a_intf), short(spec, lk.b_intf)):
            return lk
    return None


def ordered_roles(roles: set[str], tiers: dict[str, int] | None = None) -> list[str]:
    """Port roles in report order: the leaf-spine's three as always, then the others by
    their switch's tier from the top (``tiers``: switch role -> tier, defaults
    :data:`ROLE_TIERS`), uplinks first.

    >>> ordered_roles({"leaf_downlink", "leaf_uplink", "spine_downlink"})
    ['leaf_uplink', 'spine_downlink', 'leaf_downlink']
    >>> ordered_roles({"edge_uplink", "core_downlink", "edge_downlink",
    ...                "aggregation_uplink", "aggregation_downlink"})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['core_downlink', 'aggregation_uplink', 'aggregation_downlink', 'edge_uplink',
     'edge_downlink']
    """
    tiers = {**ROLE_TIERS, **(tiers or {})}
    known = [r for r in LEAF_SPINE_ROLES if r in roles]

    def key(role: str) -> tuple:
        switch_role, _, way = role.rpartition("_")
        rank = _DIRECTIONS.index(way) if way in _DIRECTIONS else len(_DIRECTIONS)
        return (-tiers.get(switch_role, 0), switch_role, rank)

    return known + sorted((r for r in roles if r not in LEAF_SPINE_ROLES), key=key)
