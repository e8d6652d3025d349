"""A spec's switches as a graph (networkx), and the checks every spec must pass.

Builders other than the shipped ones (a ``builder: package.module:Class``) return a
spec that nothing has checked; :func:`check_spec` holds it to what the rest of the
testbed relies on: unique names that fit Linux's 15 characters, links between known
nodes (hosts only to switches, a fabric link's ``a`` end of the lower tier, no two
links between the same pair), planes numbered from 0, every host cabled to every plane
alike, and every host able to reach every other host of its plane.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import networkx as nx

from topologies.spec import IFNAME_MAX, FabricSpec, TopologyError

Edge = tuple[str, str]  # a fabric link by its ends' names (a, b)


def plane_graph(spec: FabricSpec, plane: int, down: Iterable[Edge] = ()) -> nx.Graph:
    """The switches of ``plane`` (attribute ``tier``) and the fabric links between them
    that are not in ``down``.

    >>> from topologies.leafspine import build_fabric
    >>> g = plane_graph(build_fabric(prefix="tbdoc0", nodes=4), 0, down={("tbdoc0p0l0",
    ...                                                                  "tbdoc0p0s1")})
    >>> sorted(g.edges())  # doctest: +NORMALIZE_WHITESPACE
    [('tbdoc0p0l0', 'tbdoc0p0s0'), ('tbdoc0p0l1', 'tbdoc0p0s0'),
     ('tbdoc0p0l1', 'tbdoc0p0s1')]
    """
    down = {tuple(e) for e in down}
    graph = nx.Graph()
    for sw in spec.switches:
        if sw.plane == plane:
            graph.add_node(sw.name, tier=sw.tier)
    for lk in spec.links:
        if lk.kind == "fabric" and lk.plane == plane and (lk.a, lk.b) not in down:
            graph.add_edge(lk.a, lk.b)
    return graph


def unreachable(spec: FabricSpec) -> tuple[str, str, int] | None:
    """The first (host, other host, plane) with no path between them, or None."""
    for plane in range(spec.planes):
        graph = plane_graph(spec, plane)
        attached = [(h.name, i.switch) for h in spec.hosts for i in h.interfaces
                    if i.plane == plane]
        if not attached:
            continue
        first_host, first_switch = attached[0]
        reach = nx.node_connected_component(graph, first_switch)
        for host, switch in attached[1:]:
            if switch not in reach:
                return host, first_host, plane
    return None


def check_spec(spec: FabricSpec, field: str = "builder") -> None:
    """Raise :class:`TopologyError` (``field``) if ``spec`` breaks a rule every spec keeps.

    >>> from topologies.leafspine import build_fabric
    >>> check_spec(build_fabric(prefix="tbdoc0", nodes=4))
    """
    def fail(reason: str) -> None:
        raise TopologyError(field, f"the spec it returned {reason}")

    if not spec.hosts or not spec.switches:
        fail("has no hosts or no switches")
    names = Counter([sw.name for sw in spec.switches] + [h.name for h in spec.hosts]
                    + [i.name for i in spec.interfaces()]
                    + [p.ifname for p in spec.switch_ports()])
    twice = sorted(n for n, c in names.items() if c > 1)
    if twice:
        fail(f"uses the name {twice[0]!r} twice")
    for name in names:
        if len(name) > IFNAME_MAX:
            fail(f"names {name!r}, longer than {IFNAME_MAX} characters")
        if not name.startswith(spec.prefix):
            fail(f"names {name!r}, which does not start with the run prefix {spec.prefix!r}")
    if len({sw.dpid for sw in spec.switches}) != len(spec.switches):
        fail("gives two switches the same dpid")
    switches = {sw.name: sw for sw in spec.switches}
    hosts = {h.name for h in spec.hosts}
    pairs: set[frozenset[str]] = set()
    for lk in spec.links:
        if lk.kind == "host" and not (lk.a in hosts and lk.b in switches):
            fail(f"has a host link {lk.a}-{lk.b} that is not host to switch")
        if lk.kind == "fabric":
            if not (lk.a in switches and lk.b in switches):
                fail(f"has a fabric link {lk.a}-{lk.b} that is not switch to switch")
            if switches[lk.a].tier > switches[lk.b].tier:
                fail(f"has a fabric link {lk.a}-{lk.b} whose a end is the higher tier")
            if {switches[lk.a].plane, switches[lk.b].plane} != {lk.plane}:
                fail(f"has a link {lk.a}-{lk.b} between planes")
        if lk.kind not in ("host", "fabric"):
            fail(f"has a link of kind {lk.kind!r} (host or fabric)")
        pair = frozenset((lk.a, lk.b))
        if pair in pairs:
            fail(f"has two links between {lk.a} and {lk.b}")
        pairs.add(pair)
    if {sw.plane for sw in spec.switches} != set(range(spec.planes)):
        fail(f"does not number its planes 0..{spec.planes - 1}")
    shape = {(i.plane, i.rail) for i in spec.hosts[0].interfaces}
    for h in spec.hosts:
        if {(i.plane, i.rail) for i in h.interfaces} != shape:
            fail(f"cables {h.name} to other planes or rails than {spec.hosts[0].name}")
    gap = unreachable(spec)
    if gap:
        fail(f"leaves {gap[0]} unable to reach {gap[1]} on plane {gap[2]}")
