"""Builder for scaled-down, rail-optimized, multi-plane two-tier leaf-spine fabrics.

Every node has ``rails`` NICs and each NIC has one port on every plane (its bandwidth
split over the planes). Each plane is an independent leaf-spine. Nodes are split into
``groups = leaves_per_plane / rails`` scalable units; on each plane, rail ``r`` of every
node in group ``g`` connects to the same leaf (rail-optimized). Every leaf connects to
every spine of its plane; the uplink rate follows from the oversubscription ratio
(leaf downlink capacity : leaf uplink capacity).

>>> spec = build_fabric(prefix="tbdemo", planes=2, rails=2, nodes=4,
...                     leaves_per_plane=4, spines_per_plane=2, link_mbps=100)
>>> spec.counts()
{'switches': 12, 'hosts': 4, 'links': 32}
>>> h = spec.hosts[3]
>>> intf = h.interface(plane=1, rail=0)
>>> intf.name, intf.ip, intf.switch
('tbdemon3p1r0', '10.1.0.4', 'tbdemop1l2')
>>> spec.params["uplink_mbps"]  # 2 nodes per leaf at 100 Mb/s over 2 spines, 1:1
100.0
>>> build_fabric(prefix="tbdemo", rails=2, nodes=4, leaves_per_plane=4, spines_per_plane=2,
...              link_mbps=100, oversubscription=4).params["uplink_mbps"]
25.0

In a scenario file this is the default builder (``builder: leaf-spine``), with the
parameters of :class:`Params` (whose defaults are the scenario's: 2 planes of 2 leaves
and 2 spines, 8 nodes); :func:`build_fabric` keeps its own keyword defaults for callers
in code.
"""

from __future__ import annotations

from pydantic import Field

from topologies.params import Section
from topologies.spec import (
    IFNAME_MAX,
    FabricSpec,
    Host,
    HostInterface,
    Link,
    Switch,
    TopologyError,
)

MAX_PLANES = 16
MAX_RAILS = 16
MAX_NODES = 250
NAME = "leaf-spine"


class Params(Section):
    """The ``topology:`` section of a leaf-spine scenario (``builder: leaf-spine``)."""

    planes: int = Field(2, ge=1, le=MAX_PLANES, description="independent planes; every "
                        "NIC has one port on each")
    rails: int = Field(1, ge=1, le=MAX_RAILS, description="NICs per node (rail-optimized)")
    nodes: int = Field(8, ge=2, le=MAX_NODES, description="GPU nodes (hosts)")
    leaves_per_plane: int = Field(2, ge=1, le=64, description="leaves of each plane")
    spines_per_plane: int = Field(2, ge=1, le=64, description="spines of each plane")
    oversubscription: float = Field(1.0, ge=1, description="leaf downlink : uplink "
                                    "capacity (1 is non-blocking)")
    link_mbps: float = Field(100.0, ge=1, le=10000, description="host link rate, Mb/s")
    mtu: int = Field(9000, ge=1280, le=9000, description="every link's MTU")
    queue_kb: int = Field(64, ge=1, le=100_000, description="egress buffer of every port, KB")
    delay_ms: float = Field(0.0, ge=0, le=1000, description="one-way delay of every link "
                            "(where the kernel has netem)")


def build(params: Params, prefix: str) -> FabricSpec:
    """The spec of a validated ``topology:`` section."""
    return build_fabric(prefix=prefix, **params.model_dump())


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(name, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise TopologyError(name, f"must be between {low} and {high}, got {value}")
    return value


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(name, f"must be a number, got {value!r}")
    if not value > 0:
        raise TopologyError(name, f"must be greater than 0, got {value}")
    return float(value)


def mac(plane: int, rail: int, node: int) -> str:
    """A host interface's MAC (locally administered), from where it is cabled."""
    return f"02:7b:{plane:02x}:{rail:02x}:{node >> 8:02x}:{node & 0xFF:02x}"


def dpid(plane: int, tier: int, index: int) -> int:
    """Datapath id of switch ``index`` of ``tier`` on ``plane`` (every builder's).

    >>> hex(dpid(0, 1, 2))
    '0x11003'
    """
    return (plane + 1) << 16 | tier << 12 | (index + 1)


def build_fabric(
    *,
    prefix: str,
    planes: int = 1,
    rails: int = 1,
    nodes: int = 4,
    leaves_per_plane: int = 2,
    spines_per_plane: int = 2,
    oversubscription: float = 1.0,
    link_mbps: float = 100.0,
    mtu: int = 9000,
    queue_kb: int = 64,
    delay_ms: float = 0.0,
) -> FabricSpec:
    """Build the spec of a rail-optimized multi-plane leaf-spine fabric.

    ``prefix`` starts every name the fabric creates on the host (it carries the run id).
    ``mtu`` is every link's MTU (AI fabrics run jumbo frames; RoCE uses 4096-byte
    payloads); ``queue_kb`` is each switch port's egress buffer; ``delay_ms`` each link's
    one-way propagation delay (applied where the kernel has netem).
    Raises :class:`TopologyError` naming the parameter when one is impossible.
    """
    planes = _check_int("planes", planes, 1, MAX_PLANES)
    rails = _check_int("rails", rails, 1, MAX_RAILS)
    nodes = _check_int("nodes", nodes, 2, MAX_NODES)
    leaves = _check_int("leaves_per_plane", leaves_per_plane, 1, 64)
    spines = _check_int("spines_per_plane", spines_per_plane, 1, 64)
    ratio = _check_positive("oversubscription", oversubscription)
    link_mbps = _check_positive("link_mbps", link_mbps)
    mtu = _check_int("mtu", mtu, 1280, 9000)
    queue_kb = _check_int("queue_kb", queue_kb, 2 * mtu // 1000 + 1, 100_000)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float) or not (
            0 <= delay_ms <= 1000):
        raise TopologyError("delay_ms", f"must be 0..1000 milliseconds, got {delay_ms!r}")
    if ratio < 1:
        raise TopologyError("oversubscription", f"must be 1 (non-blocking) or more, got {ratio:g}")
    if leaves % rails:
        raise TopologyError(
            "leaves_per_plane",
            f"must be a multiple of rails ({rails}) so every rail has its own leaf, got {leaves}",
        )
    groups = leaves // rails
    if nodes % groups:
        raise TopologyError(
            "nodes",
            f"must split evenly over {groups} node groups (leaves_per_plane / rails), got {nodes}",
        )
    per_leaf = nodes // groups
    uplink_mbps = per_leaf * link_mbps / (ratio * spines)
    longest_switch_port = f"{prefix}p{planes - 1}l{leaves - 1}e{per_leaf + spines}"
    longest_host_port = f"{prefix}n{nodes - 1}p{planes - 1}r{rails - 1}"
    if max(len(longest_switch_port), len(longest_host_port)) > IFNAME_MAX:
        raise TopologyError(
            "prefix", f"{prefix!r} makes interface names longer than {IFNAME_MAX} characters"
        )

    switches: list[Switch] = []
    links: list[Link] = []
    for plane in range(planes):
        for i in range(leaves):
            switches.append(
                Switch(
                    name=f"{prefix}p{plane}l{i}",
                    role="leaf",
                    tier=0,
                    plane=plane,
                    index=i,
                    dpid=dpid(plane, 0, i),
                    rail=i % rails,
                    group=i // rails,
                )
            )
        for i in range(spines):
            switches.append(
                Switch(
                    name=f"{prefix}p{plane}s{i}",
                    role="spine",
                    tier=1,
                    plane=plane,
                    index=i,
                    dpid=dpid(plane, 1, i),
                )
            )

    hosts: list[Host] = []
    for node in range(nodes):
        group = node // per_leaf
        slot = node % per_leaf
        interfaces = []
        for plane in range(planes):
            for rail in range(rails):
                leaf = f"{prefix}p{plane}l{group * rails + rail}"
                port = slot + 1
                intf = HostInterface(
                    name=f"{prefix}n{node}p{plane}r{rail}",
                    plane=plane,
                    rail=rail,
                    ip=f"10.{plane}.{rail}.{node + 1}",
                    prefixlen=24,
                    mac=mac(plane, rail, node),
                    switch=leaf,
                    switch_port=port,
                )
                interfaces.append(intf)
                links.append(
                    Link(
                        a=f"{prefix}n{node}",
                        a_port=len(interfaces) - 1,
                        a_intf=intf.name,
                        b=leaf,
                        b_port=port,
                        b_intf=f"{leaf}e{port}",
                        mbps=link_mbps,
                        kind="host",
                        plane=plane,
                    )
                )
        hosts.append(Host(name=f"{prefix}n{node}", node=node, group=group,
                          interfaces=tuple(interfaces)))

    for plane in range(planes):
        for leaf_i in range(leaves):
            leaf = f"{prefix}p{plane}l{leaf_i}"
            for spine_i in range(spines):
                spine = f"{prefix}p{plane}s{spine_i}"
                leaf_port = per_leaf + 1 + spine_i
                spine_port = leaf_i + 1
                links.append(
                    Link(
                        a=leaf,
                        a_port=leaf_port,
                        a_intf=f"{leaf}e{leaf_port}",
                        b=spine,
                        b_port=spine_port,
                        b_intf=f"{spine}e{spine_port}",
                        mbps=uplink_mbps,
                        kind="fabric",
                        plane=plane,
                    )
                )

    return FabricSpec(
        prefix=prefix,
        builder=NAME,
        planes=planes,
        rails=rails,
        nodes=nodes,
        link_mbps=link_mbps,
        mtu=mtu,
        queue_kb=queue_kb,
        delay_ms=float(delay_ms),
        hosts=tuple(hosts),
        switches=tuple(switches),
        links=tuple(links),
        params={"leaves_per_plane": leaves, "spines_per_plane": spines,
                "oversubscription": ratio, "uplink_mbps": uplink_mbps},
    )
