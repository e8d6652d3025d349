"""The topology builder: rail-optimized multi-plane leaf-spine as data."""

from __future__ import annotations

import itertools

import pytest

from topologies.leafspine import build_fabric
from topologies.spec import IFNAME_MAX, FabricSpec, TopologyError


def fabric(**kw) -> FabricSpec:
    params = dict(prefix="tb00ff", planes=2, rails=2, nodes=8, leaves_per_plane=4,
                  spines_per_plane=2, link_mbps=100)
    params.update(kw)
    return build_fabric(**params)


def test_counts_follow_the_parameters():
    spec = fabric()
    assert len(spec.switches) == 2 * (4 + 2)
    assert len(spec.hosts) == 8
    host_links = [lk for lk in spec.links if lk.kind == "host"]
    uplinks = [lk for lk in spec.links if lk.kind == "fabric"]
    assert len(host_links) == 8 * 2 * 2  # nodes x planes x rails
    assert len(uplinks) == 2 * 4 * 2  # planes x leaves x spines
    assert all(len(h.interfaces) == 4 for h in spec.hosts)


def test_rail_optimized_nth_nic_of_every_node_in_a_group_shares_a_leaf():
    spec = fabric()
    for plane, rail in itertools.product(range(2), range(2)):
        for group in range(2):
            leaves = {h.interface(plane, rail).switch for h in spec.hosts if h.group == group}
            assert len(leaves) == 1
            leaf = spec.switch(leaves.pop())
            assert (leaf.plane, leaf.rail, leaf.group) == (plane, rail, group)


def test_planes_are_independent():
    spec = fabric()
    plane_of = {sw.name: sw.plane for sw in spec.switches}
    for lk in spec.links:
        if lk.kind == "fabric":
            assert plane_of[lk.a] == plane_of[lk.b] == lk.plane
        else:
            assert plane_of[lk.b] == lk.plane
    for h in spec.hosts:
        for intf in h.interfaces:
            assert plane_of[intf.switch] == intf.plane


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_oversubscription_is_leaf_downlink_over_uplink_capacity(ratio):
    spec = fabric(oversubscription=ratio)
    for leaf in (sw for sw in spec.switches if sw.role == "leaf"):
        down = sum(lk.mbps for lk in spec.links if lk.kind == "host" and lk.b == leaf.name)
        up = sum(lk.mbps for lk in spec.links if lk.kind == "fabric" and lk.a == leaf.name)
        assert down / up == pytest.approx(ratio)


def test_ports_names_and_addresses_are_unique_and_fit():
    spec = fabric(nodes=16, leaves_per_plane=4, spines_per_plane=4)
    ports = [(lk.a, lk.a_port) for lk in spec.links] + [(lk.b, lk.b_port) for lk in spec.links]
    assert len(ports) == len(set(ports))
    names = [lk.a_intf for lk in spec.links] + [lk.b_intf for lk in spec.links]
    assert len(names) == len(set(names))
    assert max(len(n) for n in names) <= IFNAME_MAX
    intfs = spec.interfaces()
    assert len({i.ip for i in intfs}) == len({i.mac for i in intfs}) == len(intfs)
    assert len({sw.dpid for sw in spec.switches}) == len(spec.switches)
    assert all(n.startswith("tb00ff") for n in names)


def test_spec_round_trips_through_json(tmp_path):
    spec = fabric()
    spec.to_json(tmp_path / "spec.json")
    assert FabricSpec.from_json(tmp_path / "spec.json") == spec


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"planes": 0}, "planes"),
        ({"rails": 3}, "leaves_per_plane"),  # 4 leaves cannot serve 3 rails evenly
        ({"nodes": 7}, "nodes"),
        ({"oversubscription": 0.5}, "oversubscription"),
        ({"link_mbps": 0}, "link_mbps"),
        ({"spines_per_plane": "two"}, "spines_per_plane"),
        ({"mtu": 100}, "mtu"),
        ({"prefix": "tbtoolongprefix"}, "prefix"),
    ],
)
def test_impossible_parameters_name_the_field(kw, field):
    with pytest.raises(TopologyError) as err:
        fabric(**kw)
    assert err.value.field == field
    assert field in str(err.value)
