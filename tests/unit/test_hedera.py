"""Hedera's pieces as pure logic: the benchmark suite's patterns, the demand estimator and
global first fit (the controller's ``gff`` mode; on real switches in
tests/integration/test_graphs.py)."""

from __future__ import annotations

import pytest

from controllers.adaptive import PathTable
from controllers.gff import Scheduler, estimate_demands, first_fit
from controllers.paths import plan_switch
from topologies.fattree import build_fattree
from traffic.patterns import hedera

N = 16


def test_stride_is_a_shift():
    for s in (1, 2, 4, 8):
        assert hedera("stride", N, stride=s) == [(i + s) % N for i in range(N)]


def test_staggered_follows_its_probabilities():
    """Over many seeds, same-edge, same-pod and far destinations come in the ratio asked
    (k=4 fat-tree: 2 hosts an edge, 4 a pod)."""
    counts = {"edge": 0, "pod": 0, "far": 0}
    for seed in range(200):
        d = hedera("staggered", N, edge_hosts=2, pod_hosts=4, edge_p=0.2, pod_p=0.3, seed=seed)
        for i, j in enumerate(d):
            assert i != j
            key = "edge" if i // 2 == j // 2 else "pod" if i // 4 == j // 4 else "far"
            counts[key] += 1
    total = sum(counts.values())
    assert counts["edge"] / total == pytest.approx(0.2, abs=0.03)
    assert counts["pod"] / total == pytest.approx(0.3, abs=0.03)
    assert counts["far"] / total == pytest.approx(0.5, abs=0.03)


def test_random_and_bijection_and_hotspot():
    for seed in range(20):
        rand = hedera("random", N, seed=seed)
        assert all(rand[i] != i for i in range(N))
        bij = hedera("bijection", N, seed=seed)
        assert sorted(bij) == list(range(N)) and all(bij[i] != i for i in range(N))
        hot = hedera("hotspot", N, hotspots=2, hot_flows=3, seed=seed)
        fan_in = sorted((hot.count(j) for j in set(hot)), reverse=True)
        assert fan_in[:2] == [3, 3] and set(fan_in[2:]) == {1} and len(fan_in) == 12
        assert all(hot[i] != i for i in range(N))
    assert hedera("random", N, seed=1) != hedera("random", N, seed=2)


@pytest.mark.parametrize("pattern, kw", [("stride", {"stride": 16}), ("nope", {}),
                                          ("hotspot", {"hotspots": 4, "hot_flows": 4})])
def test_impossible_patterns_are_refused(pattern, kw):
    with pytest.raises(ValueError):
        hedera(pattern, N, **kw)


def test_demands_respect_every_nic():
    """Whatever the flows, no sender sends and no receiver gets more than one NIC, and a
    lone flow gets a whole one (Hedera's estimator is max-min fair under NIC limits)."""
    for seed in range(20):
        dest = hedera("random", N, seed=seed)
        flows = [(i, j) for i, j in enumerate(dest)] + [(0, 5), (0, 6)]
        demand = estimate_demands(flows)
        for host in range(N):
            assert sum(d for (s, _), d in zip(flows, demand, strict=True) if s == host) <= 1.0001
            assert sum(d for (_, r), d in zip(flows, demand, strict=True) if r == host) <= 1.0001
    assert estimate_demands([("a", "b")]) == [1.0]
    # three senders to one receiver, one of them also sending elsewhere
    assert estimate_demands([(1, 9), (2, 9), (3, 9), (3, 8)]) == [0.3333, 0.3333, 0.3333,
                                                                  0.6667]


def test_first_fit_takes_the_first_path_with_room():
    paths = [[(1, 1), (2, 1)], [(1, 2), (3, 1)], [(1, 2), (4, 1)]]
    assert first_fit(paths, {}, 1.0) == 0
    assert first_fit(paths, {(2, 1): 0.5}, 0.5) == 0
    assert first_fit(paths, {(2, 1): 0.6}, 0.5) == 1
    assert first_fit(paths, {(2, 1): 0.6, (1, 2): 0.6}, 0.5) is None


def test_stride_elephants_fill_the_fat_tree_without_sharing_a_link():
    """stride 8 on the k=4 fat-tree: 16 elephants of a whole NIC each, placed one edge
    switch at a time as their counters arrive, end on paths that never share a link: the
    non-blocking placement that ECMP's hash finds only by luck. A flow that ends releases
    its links."""
    spec = build_fattree(prefix="tbx", k=4)
    table = PathTable(spec, {sw.dpid: plan_switch(spec, sw.dpid) for sw in spec.switches})
    ip = [h.interface(0, 0).ip for h in spec.hosts]
    edge = [spec.switch(h.interface(0, 0).switch).dpid for h in spec.hosts]
    flows = [(i, (i + 8) % N) for i in range(N)]
    s, known = Scheduler(), {}
    for e in sorted(set(edge)):
        mine = [f for f in flows if edge[f[0]] == e]
        known.update({f: (ip[f[0]], ip[f[1]]) for f in mine})
        s.schedule(known, {f: table.paths(e, ip[f[1]]) for f in mine})
    assert len(s.placed) == N
    links = [link for p in s.placed.values() for link in p.path]
    assert len(links) == len(set(links)) == 4 * N
    s.forget([flows[0]])
    assert len(s.placed) == N - 1 and max(s.reserved().values()) == 1.0
