"""The topology spec: plain data that Mininet, the controller and the reports all read.

A spec is built once (see :mod:`topologies.leafspine`), serialized to JSON for the
controller process, and read back with :func:`FabricSpec.from_dict`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from topologies.params import ParamError

IFNAME_MAX = 15  # Linux IFNAMSIZ - 1


class TopologyError(ParamError):
    """A topology parameter is impossible; ``field`` names it."""


@dataclass(frozen=True)
class HostInterface:
    """One NIC port of a node: rail ``rail`` on plane ``plane``."""

    name: str
    plane: int
    rail: int
    ip: str
    prefixlen: int
    mac: str
    leaf: str
    leaf_port: int


@dataclass(frozen=True)
class Host:
    """A GPU node: one namespace with ``planes * rails`` interfaces."""

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
    """A leaf or spine of one plane. Leaves serve one rail of one node group."""

    name: str
    role: str  # "leaf" or "spine"
    plane: int
    index: int
    dpid: int
    rail: int | None = None
    group: int | None = None


@dataclass(frozen=True)
class Link:
    """A cable: ``a`` side port ``a_port`` (interface ``a_intf``) to ``b`` side."""

    a: str
    a_port: int
    a_intf: str
    b: str
    b_port: int
    b_intf: str
    mbps: float
    kind: str  # "host" (node to leaf) or "uplink" (leaf to spine)
    plane: int


@dataclass(frozen=True)
class FabricSpec:
    """A multi-plane, rail-optimized two-tier leaf-spine fabric, as data."""

    prefix: str
    planes: int
    rails: int
    nodes: int
    leaves_per_plane: int
    spines_per_plane: int
    oversubscription: float
    link_mbps: float
    uplink_mbps: float
    mtu: int
    queue_kb: int
    delay_ms: float
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...] = field(default_factory=tuple)

    # -- lookups -------------------------------------------------------------------
    def switch(self, name: str) -> Switch:
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)

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

    def uplink_ports(self, leaf: str) -> list[int]:
        """Ports of ``leaf`` that lead to spines, in spine order."""
        return [lk.a_port for lk in self.links if lk.kind == "uplink" and lk.a == leaf]

    def spine_port_to(self, spine: str, leaf: str) -> int:
        for lk in self.links:
            if lk.kind == "uplink" and lk.a == leaf and lk.b == spine:
                return lk.b_port
        raise KeyError(f"no link {spine} -> {leaf}")

    def interfaces(self, plane: int | None = None) -> list[HostInterface]:
        return [
            intf
            for h in self.hosts
            for intf in h.interfaces
            if plane is None or intf.plane == plane
        ]

    def counts(self) -> dict[str, int]:
        return {
            "switches": len(self.switches),
            "hosts": len(self.hosts),
            "links": len(self.links),
        }

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
