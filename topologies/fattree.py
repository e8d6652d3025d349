"""Builder for k-ary three-tier fat-trees (Al-Fares et al., SIGCOMM'08; the Hedera testbed).

Per plane: ``k`` pods, each of ``k/2`` edge switches (tier 0, ``k/2`` hosts each) and
``k/2`` aggregation switches (tier 1); every edge switch connects to every aggregation
switch of its pod; ``(k/2)^2`` core switches (tier 2), aggregation switch ``j`` of every
pod connecting to cores ``j*k/2 .. (j+1)*k/2 - 1``. That is ``k^3/4`` hosts and
``5k^2/4`` switches a plane, all links at one rate and non-blocking. With ``planes`` > 1
every host has one NIC port on each plane, and each plane is an independent fat-tree.

>>> spec = build_fattree(prefix="tbdemo", k=4)
>>> spec.counts()
{'switches': 20, 'hosts': 16, 'links': 48}
>>> sorted({sw.role: sw.tier for sw in spec.switches}.items())
[('aggregation', 1), ('core', 2), ('edge', 0)]
>>> intf = spec.hosts[5].interface(plane=0, rail=0)
>>> intf.name, intf.ip, intf.switch, intf.switch_port
('tbdemon5p0r0', '10.0.0.6', 'tbdemop0e2', 2)
>>> spec.port_to("tbdemop0a1", "tbdemop0c3"), spec.port_to("tbdemop0c3", "tbdemop0a1")
(4, 1)
>>> spec.roles()  # doctest: +NORMALIZE_WHITESPACE
['core_downlink', 'aggregation_uplink', 'aggregation_downlink', 'edge_uplink',
 'edge_downlink']
"""

from __future__ import annotations

from pydantic import Field

from topologies.leafspine import MAX_PLANES, dpid, mac
from topologies.params import Section
from topologies.spec import IFNAME_MAX, FabricSpec, Host, HostInterface, Link, Switch, TopologyError

NAME = "fat-tree"
#: k = 10 gives 250 hosts a plane, the most one /24 per plane holds with room to spare
MAX_K = 10


class Params(Section):
    """The ``topology:`` section of a fat-tree scenario (``builder: fat-tree``)."""

    k: int = Field(4, ge=2, le=MAX_K, description="switch radix (even): k pods, k^3/4 hosts "
                   "and 5k^2/4 switches a plane")
    planes: int = Field(1, ge=1, le=MAX_PLANES, description="independent fat-trees; every "
                        "host has one NIC port on each")
    link_mbps: float = Field(100.0, ge=1, le=10000, description="every link's rate, Mb/s")
    mtu: int = Field(9000, ge=1280, le=9000, description="every link's MTU")
    queue_kb: int = Field(64, ge=1, le=100_000, description="egress buffer of every port, KB")
    delay_ms: float = Field(0.0, ge=0, le=1000, description="one-way delay of every link "
                            "(where the kernel has netem)")


def build(params: Params, prefix: str) -> FabricSpec:
    """The spec of a validated ``topology:`` section."""
    return build_fattree(prefix=prefix, **params.model_dump())


def build_fattree(*, prefix: str, k: int = 4, planes: int = 1, link_mbps: float = 100.0,
                  mtu: int = 9000, queue_kb: int = 64, delay_ms: float = 0.0) -> FabricSpec:
    """Build the spec of ``planes`` independent k-ary fat-trees sharing their hosts.

    Raises :class:`TopologyError` naming the parameter when one is impossible.
    """
    if k % 2:
        raise TopologyError("k", f"must be even (half of each switch's ports face down), "
                                 f"got {k}")
    if queue_kb < 2 * mtu // 1000 + 1:
        raise TopologyError("queue_kb", f"must hold two frames of the MTU ({mtu}), "
                                        f"got {queue_kb}")
    half = k // 2
    hosts_n, edges_n, cores_n = k * half * half, k * half, half * half
    longest = max(f"{prefix}p{planes - 1}a{edges_n - 1}e{k}",
                  f"{prefix}p{planes - 1}c{cores_n - 1}e{k}",
                  f"{prefix}n{hosts_n - 1}p{planes - 1}r0", key=len)
    if len(longest) > IFNAME_MAX:
        raise TopologyError("prefix", f"{prefix!r} makes interface names such as {longest!r} "
                                      f"longer than {IFNAME_MAX} characters")

    def name(plane: int, word: str, i: int) -> str:
        return f"{prefix}p{plane}{word}{i}"

    switches: list[Switch] = []
    for plane in range(planes):
        for tier, (word, role, count) in enumerate(
                (("e", "edge", edges_n), ("a", "aggregation", edges_n), ("c", "core", cores_n))):
            for i in range(count):
                switches.append(Switch(name=name(plane, word, i), role=role, tier=tier,
                                       plane=plane, index=i, dpid=dpid(plane, tier, i),
                                       group=i // half if tier < 2 else None))

    links: list[Link] = []
    hosts: list[Host] = []
    for node in range(hosts_n):
        edge, slot = node // half, node % half
        interfaces = []
        for plane in range(planes):
            switch, port = name(plane, "e", edge), slot + 1
            intf = HostInterface(name=f"{prefix}n{node}p{plane}r0", plane=plane, rail=0,
                                 ip=f"10.{plane}.0.{node + 1}", prefixlen=24,
                                 mac=mac(plane, 0, node), switch=switch, switch_port=port)
            interfaces.append(intf)
            links.append(Link(a=f"{prefix}n{node}", a_port=plane, a_intf=intf.name,
                              b=switch, b_port=port, b_intf=f"{switch}e{port}",
                              mbps=float(link_mbps), kind="host", plane=plane))
        hosts.append(Host(name=f"{prefix}n{node}", node=node, group=edge // half,
                          interfaces=tuple(interfaces)))

    def cable(plane: int, low: str, low_port: int, high: str, high_port: int) -> None:
        links.append(Link(a=low, a_port=low_port, a_intf=f"{low}e{low_port}", b=high,
                          b_port=high_port, b_intf=f"{high}e{high_port}",
                          mbps=float(link_mbps), kind="fabric", plane=plane))

    for plane in range(planes):
        for pod in range(k):
            for e in range(half):  # edge port half+1+j -> aggregation j, its port e+1
                for j in range(half):
                    cable(plane, name(plane, "e", pod * half + e), half + 1 + j,
                          name(plane, "a", pod * half + j), e + 1)
        for pod in range(k):
            for j in range(half):  # aggregation port half+1+c -> core j*half+c, its port pod+1
                for c in range(half):
                    cable(plane, name(plane, "a", pod * half + j), half + 1 + c,
                          name(plane, "c", j * half + c), pod + 1)

    return FabricSpec(
        prefix=prefix, builder=NAME, planes=planes, rails=1, nodes=hosts_n,
        link_mbps=float(link_mbps), mtu=mtu, queue_kb=queue_kb, delay_ms=float(delay_ms),
        hosts=tuple(hosts), switches=tuple(switches), links=tuple(links),
        params={"k": k, "pods": k, "edges_per_pod": half, "aggregations_per_pod": half,
                "cores": cores_n},
    )
