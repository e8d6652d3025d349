"""Topology drawings: hosts in natural order (n2 before n10), each under its own edge or
leaf switch, so no host link crosses another's."""

from __future__ import annotations

from testbed.reports import graph
from topologies.build import build_topology


def test_fat_tree_hosts_in_natural_order_under_their_edge():
    spec = build_topology({"builder": "fat-tree", "k": 4}, "tb0000")
    g = graph.fabric_graph(spec)
    pos = graph._fabric_positions(g)
    hosts = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "host"),
                   key=lambda n: pos[n][0])
    assert hosts == [f"n{i}" for i in range(16)]
    for host in hosts:  # every host link goes up to the nearest edge switch
        (edge,) = list(g.neighbors(host))
        edges = [n for n, d in g.nodes(data=True) if d.get("role") == "edge"]
        assert min(edges, key=lambda e: abs(pos[e][0] - pos[host][0])) == edge


def test_two_plane_leaf_spine_hosts_follow_their_plane_0_leaf():
    spec = build_topology({"nodes": 12, "planes": 2, "leaves_per_plane": 3}, "tb0000")
    g = graph.fabric_graph(spec)
    pos = graph._fabric_positions(g)
    hosts = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "host"),
                   key=lambda n: pos[n][0])
    assert hosts == [f"n{i}" for i in range(12)]
