"""Plans on graphs other than the leaf-spine, proven by walking them packet by packet.

The walk plays each switch's rules as OpenFlow would (:func:`forward`): bounce and
fast-failover rules above the routes, a fast-failover group takes its first bucket
whose port is live, an ECMP set any live member (every one is followed), an output to
the port the packet came in on is dropped unless it is ``IN_PORT``, a bounce
decrements the TTL (IPv4) or marks the packet (ARP) and a marked ARP packet that comes
back on a member of the set is dropped. Every branch of every host pair on every plane
must reach the destination host.
"""

from __future__ import annotations

import pytest

from controllers.failover import IN_PORT, plan_failover
from controllers.paths import plan_switch
from topologies.build import build_topology
from topologies.fattree import build_fattree
from topologies.spec import FabricSpec

P = "tb0f0f"
EXPLICIT = {
    "nodes": {"s1": {"kind": "switch"}, "s2": {"kind": "switch"}, "l1": {"kind": "switch"},
              "l2": {"kind": "switch"}, "l3": {"kind": "switch"},
              **{f"h{i}": {"kind": "host"} for i in range(1, 7)}},
    "links": [{"endpoints": ["h1", "l1"]}, {"endpoints": ["h2", "l1"]},
              {"endpoints": ["h3", "l2"]}, {"endpoints": ["h4", "l2"]},
              {"endpoints": ["h5", "l3"]}, {"endpoints": ["h6", "l3"]},
              {"endpoints": ["l1", "s1"]}, {"endpoints": ["l1", "s2"]},
              {"endpoints": ["l2", "s1"]}, {"endpoints": ["l2", "s2"]},
              {"endpoints": ["l3", "s2"]}]}


def peers(spec: FabricSpec) -> dict[tuple[str, int], tuple[str, int]]:
    out = {}
    for lk in spec.links:
        out[(lk.a, lk.a_port)] = (lk.b, lk.b_port)
        out[(lk.b, lk.b_port)] = (lk.a, lk.a_port)
    return out


_INDEX: dict[int, tuple] = {}


def _index(plan) -> tuple:
    if id(plan) not in _INDEX or _INDEX[id(plan)][0] is not plan:
        _INDEX[id(plan)] = (
            plan, set(getattr(plan, "arp_guards", [])),
            {(q, d): g for q, d, g in getattr(plan, "ff_routes", [])},
            {(b.in_port, b.ip, b.arp): b.group for b in getattr(plan, "bounces", [])},
            {r.ip: r for r in plan.routes})
    return _INDEX[id(plan)][1:]


def forward(plan, in_port: int, ip: str, arp: bool, marked: bool, live) -> list[tuple]:
    """(out port, decrement TTL, mark, via IN_PORT) choices of one switch for one packet;
    [] = drop."""
    guards, ff, bounces, routes = _index(plan)
    if arp and marked and (in_port, ip) in guards:
        return []
    if (in_port, ip) in ff:
        for port, watch in plan.ff_groups[ff[(in_port, ip)]]:
            if live(watch):
                return [(in_port if port == IN_PORT else port, False, False, True)]
        return []
    if (in_port, ip, arp) in bounces:
        return [(p, not arp, arp, False) for p in plan.groups[bounces[(in_port, ip, arp)]]
                if live(p)]
    route = routes.get(ip)
    if route is None:
        return []
    return [(p, False, False, False) for p in plan.members(route) if live(p)]


def deliveries(spec, plans, src, dst, *, down=frozenset(), arp=False) -> list[list[str]]:
    """Every path a packet from interface ``src`` to ``dst`` may take; AssertionError on a
    drop, a loop or an expired TTL."""
    cable = peers(spec)
    dead = {(lk.a, lk.a_port) for lk in spec.links if (lk.a, lk.b) in down}
    dead |= {(lk.b, lk.b_port) for lk in spec.links if (lk.a, lk.b) in down}
    done = []

    def step(switch, in_port, ttl, marked, path):
        assert ttl > 0 and len(path) < 40, f"TTL ran out: {path}"
        plan = plans[switch]
        choices = forward(plan, in_port, dst.ip, arp, marked,
                          lambda port: (switch, port) not in dead)
        assert choices, f"dropped at {switch} (in port {in_port}): {path}"
        for port, dec, mark, via_in_port in choices:
            assert port != in_port or via_in_port, f"output to in_port at {switch}: {path}"
            node, their_port = cable[(switch, port)]
            if node in plans:
                step(node, their_port, ttl - dec, marked or mark, path + [node])
            else:
                assert node == spec.host(node).name and dst in spec.host(node).interfaces, \
                    f"delivered to {node}, not {dst.name}: {path}"
                done.append(path)

    step(src.switch, src.switch_port, 64, False, [src.switch])
    return done


def every_pair(spec, plans, planes=None, **kw) -> int:
    n = 0
    for plane in planes if planes is not None else range(spec.planes):
        for a in spec.hosts:
            for b in spec.hosts:
                if a is not b:
                    for rail in range(spec.rails):
                        paths = deliveries(spec, plans, a.interface(plane, rail),
                                           b.interface(plane, rail), **kw)
                        assert paths
                        n += len(paths)
    return n


def fabric_links(spec):
    """(link, its plane) of every fabric link."""
    return [((lk.a, lk.b), lk.plane) for lk in spec.links if lk.kind == "fabric"]


SPECS = {
    "fat-tree": lambda: build_fattree(prefix=P, k=4, planes=2),
    "fat-tree-6": lambda: build_fattree(prefix=P, k=6),
    "explicit": lambda: build_topology(EXPLICIT, P),
    "ring": lambda: build_topology({"builder": "examples.builders.ring:Ring",
                                    "switches": 6, "hosts_per_switch": 1}, P),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_pair_delivered_on_every_plane(name, plugins_load):
    spec = SPECS[name]()
    plans = {sw.name: plan_switch(spec, sw.dpid) for sw in spec.switches}
    assert every_pair(spec, plans) > 0


def test_fat_tree_paths_are_the_equal_cost_ones():
    spec = build_fattree(prefix=P, k=4)
    plans = {sw.name: plan_switch(spec, sw.dpid) for sw in spec.switches}
    h = spec.hosts
    # same edge: 1 switch; same pod: 2 paths of 3 switches; other pod: 4 paths of 5
    for dst, count, hops in ((h[1], 1, 1), (h[2], 2, 3), (h[15], 4, 5)):
        paths = deliveries(spec, plans, h[0].interface(0, 0), dst.interface(0, 0))
        assert len(paths) == count and {len(p) for p in paths} == {hops}
    edge = plans[P + "p0e0"]
    assert edge.groups == {1: spec.uplink_ports(P + "p0e0")}  # set 1: the uplinks, as a leaf
    agg = plans[P + "p0a0"]
    assert sorted(map(tuple, agg.groups.values())) == [tuple(spec.uplink_ports(P + "p0a0"))]
    assert all(r.group is None for r in plans[P + "p0c0"].routes)


def test_ring_uses_both_ways_to_the_opposite_switch(plugins_load):
    spec = SPECS["ring"]()
    plans = {sw.name: plan_switch(spec, sw.dpid) for sw in spec.switches}
    paths = deliveries(spec, plans, spec.hosts[0].interface(0, 0),
                       spec.hosts[3].interface(0, 0))
    assert len(paths) == 2 and {len(p) for p in paths} == {4}


@pytest.mark.parametrize("name", ["fat-tree", "explicit", "ring"])
def test_recompute_delivers_around_every_dead_link(name, plugins_load):
    spec = SPECS[name]()
    for link, plane in fabric_links(spec):
        if name == "explicit" and link == (P + "l3", P + "s2"):
            continue  # l3's only link: its hosts are cut off
        plans = {sw.name: plan_failover(spec, sw.dpid, down={link}) for sw in spec.switches
                 if sw.plane == plane}
        assert every_pair(spec, plans, [plane], down={link}), link


@pytest.mark.parametrize("name", ["fat-tree", "explicit"])
@pytest.mark.parametrize("arp", [False, True])
def test_fast_failover_delivers_around_every_dead_link_without_the_controller(name, arp):
    spec = SPECS[name]()
    plans = {sw.name: plan_failover(spec, sw.dpid, fast_failover=True)
             for sw in spec.switches}
    bounced = 0
    for link, plane in fabric_links(spec):
        if name == "explicit" and link == (P + "l3", P + "s2"):
            continue
        every_pair(spec, plans, [plane], down={link}, arp=arp)
        bounced += 1
    assert bounced


def test_fast_failover_in_a_fat_tree_bounces_and_detours():
    spec = build_fattree(prefix=P, k=4)
    agg = plan_failover(spec, spec.switch(P + "p0a0").dpid, fast_failover=True)
    to_e1 = spec.port_to(P + "p0a0", P + "p0e1")
    from_e0 = spec.port_to(P + "p0a0", P + "p0e0")
    from_core = spec.port_to(P + "p0a0", P + "p0c0")
    ip = spec.hosts[2].interface(0, 0).ip  # behind edge 1, pod 0
    groups = {(q, d): agg.ff_groups[g] for q, d, g in agg.ff_routes}
    # from an edge of the pod: back to it (it has another aggregation switch)
    assert groups[(from_e0, ip)] == [(to_e1, to_e1), (IN_PORT, from_e0)]
    # from a core (one way into the pod): detour down through the other edge
    assert groups[(from_core, ip)] == [(to_e1, to_e1), (from_e0, from_e0)]
    # the other edge re-spreads a packet bounced to it: over its other aggregation switch
    edge = plan_failover(spec, spec.switch(P + "p0e0").dpid, fast_failover=True)
    up = spec.uplink_ports(P + "p0e0")
    assert {edge.groups[b.group][0] for b in edge.bounces
            if b.ip == ip and b.in_port == up[0]} == {up[1]}


def test_two_dead_links_with_recompute_in_a_fat_tree():
    spec = build_fattree(prefix=P, k=4)
    down = {(P + "p0e0", P + "p0a0"), (P + "p0a2", P + "p0c1")}
    plans = {sw.name: plan_failover(spec, sw.dpid, down=down, fast_failover=True)
             for sw in spec.switches}
    assert every_pair(spec, plans, down=down)
