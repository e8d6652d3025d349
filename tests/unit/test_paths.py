"""Controller paths, checked by walking the plans: every host pair, every plane, every bucket."""

from __future__ import annotations

import pytest

from controllers.paths import ECMP_GROUP, plan_switch
from topologies.leafspine import build_fabric


def walk(spec, plans, src_intf, dst_ip, seen=None):
    """All switch paths a packet from ``src_intf`` to ``dst_ip`` may take (every bucket)."""
    port_to_peer = {}
    for lk in spec.links:
        port_to_peer[(lk.b, lk.b_port)] = (lk.a, lk.a_port)
        port_to_peer[(lk.a, lk.a_port)] = (lk.b, lk.b_port)
    paths = []

    def step(switch, path):
        assert len(path) < 6, f"loop: {path}"
        plan = plans[switch]
        route = next(r for r in plan.routes if r.ip == dst_ip)
        ports = plan.groups[route.group] if route.group is not None else [route.port]
        for port in ports:
            node, _ = port_to_peer[(switch, port)]
            if node in plans:
                step(node, path + [node])
            else:
                paths.append((path, node))

    step(src_intf.switch, [src_intf.switch])
    return paths


@pytest.mark.parametrize("oversub", [1, 4])
def test_every_host_pair_reaches_on_every_plane_over_every_bucket(oversub):
    spec = build_fabric(prefix="tb00ee", planes=2, rails=2, nodes=8, leaves_per_plane=4,
                        spines_per_plane=2, oversubscription=oversub)
    plans = {sw.name: plan_switch(spec, sw.dpid) for sw in spec.switches}
    for plane in range(spec.planes):
        for rail in range(spec.rails):
            for a in spec.hosts:
                for b in spec.hosts:
                    if a is b:
                        continue
                    src, dst = a.interface(plane, rail), b.interface(plane, rail)
                    paths = walk(spec, plans, src, dst.ip)
                    assert paths and all(end == b.name for _, end in paths)
                    same_leaf = src.switch == dst.switch
                    expected_hops = 1 if same_leaf else 3
                    assert all(len(p) == expected_hops for p, _ in paths)
                    if not same_leaf:  # ECMP: one path per spine
                        assert len(paths) == spec.params["spines_per_plane"]


def test_leaves_spread_over_all_spines_with_one_ecmp_set():
    spec = build_fabric(prefix="tb00ee", nodes=4, leaves_per_plane=2, spines_per_plane=3)
    for sw in spec.switches:
        plan = plan_switch(spec, sw.dpid)
        if sw.role == "leaf":
            assert plan.groups == {ECMP_GROUP: spec.uplink_ports(sw.name)}
            assert len(plan.groups[ECMP_GROUP]) == 3
        else:
            assert plan.groups == {}


def test_unknown_dpid_is_refused():
    spec = build_fabric(prefix="tb00ee", nodes=4)
    with pytest.raises(KeyError):
        plan_switch(spec, 0xDEAD)
