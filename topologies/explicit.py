"""Builder for any graph drawn by hand: ``nodes:`` and ``links:``, as in a containerlab file.

```yaml
topology:
  nodes:
    s1: {kind: switch}            # tier and role follow from the graph when not given
    l1: {kind: switch}
    l2: {kind: switch}
    h1: {kind: host}
    h2: {kind: host}
  links:
    - endpoints: [h1, l1]
    - endpoints: [h2, l2]
    - endpoints: [l1, s1]
    - endpoints: [l2, s1]
      mbps: 50                    # else link_mbps
```

A switch's ``tier`` defaults to its distance (in switch hops) from the nearest switch
that attaches hosts, so a drawn leaf-spine gets leaves at 0 and spines at 1; its
``role`` defaults to leaf, spine or core by tier (``switch`` in a flat graph); its
``plane`` to 0. A host gets one interface per link, on the plane of the switch at the
other end (rails 0, 1, ... in link order per plane): every host must be cabled the same
way (the same number of rails on every plane), and every host must reach every other
host of its plane. Ports are numbered per switch in link order from 1; addresses are
``10.plane.rail.(host number + 1)/24``, hosts numbered in the order of ``nodes``.

Every problem is one :class:`TopologyError` whose field is relative to the topology
section: ``links[3].endpoints[1]``, ``nodes.h7``.

>>> spec = build_explicit(parse(Params, {
...     "nodes": {"s1": {"kind": "switch"}, "l1": {"kind": "switch"},
...               "l2": {"kind": "switch"}, "h1": {"kind": "host"}, "h2": {"kind": "host"}},
...     "links": [{"endpoints": ["h1", "l1"]}, {"endpoints": ["h2", "l2"]},
...               {"endpoints": ["l1", "s1"]}, {"endpoints": ["s1", "l2"], "mbps": 50}]}),
...     prefix="tbdemo")
>>> [(sw.name, sw.role, sw.tier, sw.dpid) for sw in spec.switches]
[('tbdemos1', 'spine', 1, 69633), ('tbdemol1', 'leaf', 0, 65537), ('tbdemol2', 'leaf', 0, 65538)]
>>> h2 = spec.hosts[1].interface(0, 0)
>>> h2.name, h2.ip, h2.switch, h2.switch_port
('tbdemoh2p0r0', '10.0.0.2', 'tbdemol2', 1)
>>> [(lk.a, lk.b, lk.mbps) for lk in spec.links if lk.kind == "fabric"]
[('tbdemol1', 'tbdemos1', 100.0), ('tbdemol2', 'tbdemos1', 50.0)]
>>> build_explicit(parse(Params, {"nodes": {"h1": {"kind": "host"}, "h2": {"kind": "host"},
...     "s1": {"kind": "switch"}}, "links": [{"endpoints": ["h1", "s9"]}]}), prefix="tbdemo")
Traceback (most recent call last):
...
topologies.spec.TopologyError: links[0].endpoints[1]: unknown node 's9' (nodes: h1, h2, s1)
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

import networkx as nx
from pydantic import Field

from topologies.graph import check_spec, unreachable
from topologies.leafspine import MAX_NODES, MAX_PLANES, MAX_RAILS, dpid, mac
from topologies.params import Section, parse  # noqa: F401 (parse: the doctest's)
from topologies.spec import IFNAME_MAX, FabricSpec, Host, HostInterface, Link, Switch, TopologyError

NAME = "explicit"
NODE_NAME = r"^[a-z][a-z0-9]*$"
#: the run prefix every name gets (``tb`` + 4 hex digits)
PREFIX_LEN = 6
MAX_TIER = 15


class Node(Section):
    """One entry of ``nodes:``."""

    kind: Literal["switch", "host"] = Field(description="switch or host")
    tier: int | None = Field(None, ge=0, le=MAX_TIER, description="switches: 0 attaches "
                             "hosts; default: hops from the nearest switch with hosts")
    role: str | None = Field(None, pattern=r"^[a-z][a-z]*$", max_length=20,
                             description="switches: leaf, spine, edge, aggregation, core, "
                             "switch...; default by tier")
    plane: int | None = Field(None, ge=0, lt=MAX_PLANES, description="switches: their "
                              "plane (default 0); hosts: the plane all their links go to")


class Cable(Section):
    """One entry of ``links:``."""

    endpoints: list[str] = Field(min_length=2, max_length=2, description="the two node names")
    mbps: float | None = Field(None, ge=1, le=10000, description="rate (default link_mbps)")


class Params(Section):
    """The ``topology:`` section of an explicit graph (``builder: explicit``, or a
    ``nodes:`` mapping)."""

    nodes: dict[str, Node] = Field(description="name -> {kind, tier?, role?, plane?}")
    links: list[Cable] = Field(min_length=1, description="[{endpoints: [a, b], mbps?}]")
    link_mbps: float = Field(100.0, ge=1, le=10000, description="rate of links without mbps")
    mtu: int = Field(9000, ge=1280, le=9000, description="every link's MTU")
    queue_kb: int = Field(64, ge=1, le=100_000, description="egress buffer of every port, KB")
    delay_ms: float = Field(0.0, ge=0, le=1000, description="one-way delay of every link "
                            "(where the kernel has netem)")


def build(params: Params, prefix: str) -> FabricSpec:
    """The spec of a validated ``topology:`` section."""
    return build_explicit(params, prefix=prefix)


def _default_role(tier: int, flat: bool) -> str:
    return "switch" if flat else {0: "leaf", 1: "spine", 2: "core"}.get(tier, "switch")


def build_explicit(params: Params, *, prefix: str) -> FabricSpec:
    """Build the spec of the graph in ``params``; :class:`TopologyError` names the first
    node or link that is impossible."""
    nodes = params.nodes
    known = ", ".join(nodes)
    switch_names = [n for n, v in nodes.items() if v.kind == "switch"]
    host_names = [n for n, v in nodes.items() if v.kind == "host"]
    for name, node in nodes.items():
        if not re.fullmatch(NODE_NAME, name):
            raise TopologyError(f"nodes.{name}", "a name is lowercase letters and digits, "
                                                 "starting with a letter")
        if node.kind == "host" and (node.tier is not None or node.role is not None):
            raise TopologyError(f"nodes.{name}", "tier and role are for switches")
    if not switch_names or len(host_names) < 2:
        raise TopologyError("nodes", f"needs a switch and at least two hosts, got "
                                     f"{len(switch_names)} switch(es), {len(host_names)} host(s)")
    if params.queue_kb < 2 * params.mtu // 1000 + 1:
        raise TopologyError("queue_kb", f"must hold two frames of the MTU ({params.mtu}), "
                                        f"got {params.queue_kb}")
    if len(host_names) > MAX_NODES:
        raise TopologyError("nodes", f"at most {MAX_NODES} hosts, got {len(host_names)}")

    seen: dict[frozenset[str], int] = {}
    for i, cable in enumerate(params.links):
        a, b = cable.endpoints
        for j, end in enumerate((a, b)):
            if end not in nodes:
                raise TopologyError(f"links[{i}].endpoints[{j}]",
                                    f"unknown node {end!r} (nodes: {known})")
        if a == b:
            raise TopologyError(f"links[{i}].endpoints", f"links {a!r} to itself")
        if nodes[a].kind == "host" and nodes[b].kind == "host":
            raise TopologyError(f"links[{i}].endpoints",
                                f"joins two hosts ({a}, {b}); a host is cabled to a switch")
        pair = frozenset((a, b))
        if pair in seen:
            raise TopologyError(f"links[{i}]", f"duplicates links[{seen[pair]}] ({a}-{b})")
        seen[pair] = i

    plane = {n: nodes[n].plane or 0 for n in switch_names}
    for i, cable in enumerate(params.links):
        a, b = cable.endpoints
        if nodes[a].kind == nodes[b].kind == "switch" and plane[a] != plane[b]:
            raise TopologyError(f"links[{i}].endpoints", f"joins plane {plane[a]} ({a}) and "
                                f"plane {plane[b]} ({b}); every plane is a fabric of its own")
        for j, (host, switch) in enumerate(((a, b), (b, a))):
            wanted = nodes[host].plane
            if nodes[host].kind == "host" and wanted is not None and plane[switch] != wanted:
                raise TopologyError(f"links[{i}].endpoints[{j}]",
                                    f"host {host} is on plane {wanted}, switch {switch} on "
                                    f"plane {plane[switch]}")
    planes = sorted(set(plane.values()))
    if planes != list(range(len(planes))):
        raise TopologyError("nodes", f"planes must be numbered from 0 without gaps, got "
                                     f"{planes}")

    tier = _tiers(params, switch_names)
    flat = max(tier.values()) == 0
    ports: Counter[str] = Counter()
    rails: dict[tuple[str, int], int] = {}  # (host, plane) -> interfaces so far
    for cable in params.links:
        for end, other in (cable.endpoints, cable.endpoints[::-1]):
            if nodes[end].kind == "switch":
                ports[end] += 1
            elif nodes[other].kind == "switch":
                rails[(end, plane[other])] = rails.get((end, plane[other]), 0) + 1
    too_long = [(n, f"{'x' * PREFIX_LEN}{n}e{ports[n]}") for n in switch_names]
    too_long += [(h, f"{'x' * PREFIX_LEN}{h}p{p}r{r - 1}") for (h, p), r in rails.items()]
    for name, ifname in too_long:
        if len(ifname) > IFNAME_MAX:
            raise TopologyError(f"nodes.{name}", f"the name is too long: with the "
                                f"{PREFIX_LEN}-character run prefix its interface names "
                                f"(such as {ifname!r}) exceed {IFNAME_MAX} characters")
    shape = {p: rails.get((host_names[0], p), 0) for p in planes}
    for host in host_names:
        mine = {p: rails.get((host, p), 0) for p in planes}
        if not any(mine.values()):
            raise TopologyError(f"nodes.{host}", "has no link")
        if mine != shape:
            raise TopologyError(f"nodes.{host}", f"has {_plural(mine)}, {host_names[0]} has "
                                f"{_plural(shape)}: every host needs the same interfaces")
    if max(shape.values()) > MAX_RAILS:
        raise TopologyError("links", f"at most {MAX_RAILS} interfaces a host and plane")

    spec = _assemble(params, prefix, tier, plane, flat, len(planes), max(shape.values()))
    gap = unreachable(spec)
    if gap:
        host, other = (name.removeprefix(prefix) for name in gap[:2])
        raise TopologyError(f"nodes.{host}", f"cannot reach {other} on plane {gap[2]}: no "
                                             "path through the links")
    check_spec(spec, field="nodes")  # what every spec keeps (names unique, ...)
    return spec


def _plural(counts: dict[int, int]) -> str:
    return ", ".join(f"{n} interface(s) on plane {p}" for p, n in counts.items())


def _tiers(params: Params, switch_names: list[str]) -> dict[str, int]:
    """Each switch's tier: given, else hops from the nearest switch that attaches hosts."""
    nodes = params.nodes
    graph = nx.Graph()
    graph.add_nodes_from(switch_names)
    with_hosts = set()
    for cable in params.links:
        a, b = cable.endpoints
        if nodes[a].kind == nodes[b].kind == "switch":
            graph.add_edge(a, b)
        else:
            with_hosts.add(a if nodes[a].kind == "switch" else b)
    hops = nx.multi_source_dijkstra_path_length(graph, with_hosts) if with_hosts else {}
    return {n: nodes[n].tier if nodes[n].tier is not None else hops.get(n, 0)
            for n in switch_names}


def _assemble(params: Params, prefix: str, tier: dict[str, int], plane: dict[str, int],
              flat: bool, planes: int, rails: int) -> FabricSpec:
    nodes = params.nodes
    full = {n: prefix + n for n in nodes}
    switches, index = [], Counter()
    for name, node in nodes.items():
        if node.kind != "switch":
            continue
        key = (plane[name], tier[name])
        switches.append(Switch(name=full[name], role=node.role or _default_role(tier[name], flat),
                               tier=tier[name], plane=plane[name], index=index[key],
                               dpid=dpid(plane[name], tier[name], index[key])))
        index[key] += 1
    number = {h: i for i, h in enumerate(n for n, v in nodes.items() if v.kind == "host")}
    next_port: Counter[str] = Counter()
    interfaces: dict[str, list[HostInterface]] = {h: [] for h in number}
    links = []
    for cable in params.links:
        a, b = cable.endpoints
        mbps = float(cable.mbps if cable.mbps is not None else params.link_mbps)
        if nodes[a].kind == "host" or nodes[b].kind == "host":
            host, switch = (a, b) if nodes[a].kind == "host" else (b, a)
            p = plane[switch]
            rail = sum(1 for i in interfaces[host] if i.plane == p)
            next_port[switch] += 1
            port = next_port[switch]
            intf = HostInterface(name=f"{full[host]}p{p}r{rail}", plane=p, rail=rail,
                                 ip=f"10.{p}.{rail}.{number[host] + 1}", prefixlen=24,
                                 mac=mac(p, rail, number[host]), switch=full[switch],
                                 switch_port=port)
            links.append(Link(a=full[host], a_port=len(interfaces[host]), a_intf=intf.name,
                              b=full[switch], b_port=port, b_intf=f"{full[switch]}e{port}",
                              mbps=mbps, kind="host", plane=p))
            interfaces[host].append(intf)
            continue
        low, high = (a, b) if tier[a] <= tier[b] else (b, a)
        next_port[low] += 1
        next_port[high] += 1
        lp, hp = next_port[low], next_port[high]
        links.append(Link(a=full[low], a_port=lp, a_intf=f"{full[low]}e{lp}", b=full[high],
                          b_port=hp, b_intf=f"{full[high]}e{hp}", mbps=mbps, kind="fabric",
                          plane=plane[low]))
    hosts = tuple(Host(name=full[h], node=number[h], group=0, interfaces=tuple(interfaces[h]))
                  for h in number)
    return FabricSpec(
        prefix=prefix, builder=NAME, planes=planes, rails=rails, nodes=len(hosts),
        link_mbps=float(params.link_mbps), mtu=params.mtu, queue_kb=params.queue_kb,
        delay_ms=float(params.delay_ms), hosts=hosts, switches=tuple(switches),
        links=tuple(links), params={"tiers": max(tier.values()) + 1})
