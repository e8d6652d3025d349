"""The backbone model and its design rule (four separate paths, dual-homed regions)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest
import yaml

from topologies import backbone_check
from topologies.backbone import (
    Backbone,
    Link,
    Pop,
    Region,
    RiskGroup,
    default_backbone,
    small_backbone,
)
from topologies.backbone_check import (
    DesignError,
    DesignLimit,
    design_check,
    pop_graph,
    require,
    separate_paths,
)

REPO = Path(__file__).resolve().parents[2]


def test_default_backbone_passes():
    bb = default_backbone()
    check = require(bb)
    assert check.ok and not check.errors
    assert {p.area for p in bb.pops} == {"na", "eu", "me", "apac"}
    assert any(lk.kind == "subsea" for lk in bb.links)
    assert all(len(e["peers"]) >= 2 for e in check.pops.values())


def test_small_backbone_passes():
    assert require(small_backbone()).ok


def test_round_trip_through_dict():
    bb = default_backbone()
    assert Backbone.from_dict(bb.to_dict()) == bb


def test_parallel_links_in_one_cable_count_once():
    bb = default_backbone()
    g = pop_graph(bb)
    # without the cable, nyc-lon-1 and nyc-lon-2 are two separate direct paths
    no_groups = replace(bb, risk_groups=())
    g2 = pop_graph(no_groups)
    direct = [k for _, v, k in g.edges("nyc", keys=True) if v == "lon"]
    assert len(direct) == 2
    assert separate_paths(g, "nyc", "lon", want=10) < separate_paths(g2, "nyc", "lon", want=10)


def test_pop_without_separate_paths_is_rejected_by_name():
    bb = small_backbone()
    # put both parallel p1-p2 links into one conduit: p1 keeps only 3 separate exits
    bad = replace(bb, risk_groups=(RiskGroup("duct", "conduit", ("p1-p2-1", "p1-p2-2")),))
    check = design_check(bad)
    assert not check.ok
    assert not check.pops["p1"]["ok"]
    with pytest.raises(DesignError) as err:
        require(bad)
    assert err.value.node in ("p1", "p2")
    assert err.value.node in str(err.value)


def test_cable_carrying_two_spans_is_rejected():
    bb = small_backbone()
    # one cable carries a link on each side of p2: p2 has three independent exits left
    bad = replace(bb, risk_groups=(RiskGroup("cable", "subsea-cable", ("p1-p2-1", "p2-p3-1")),))
    with pytest.raises(DesignError, match="PoP p2 has only 3 independent exits"):
        require(bad)


def test_pop_with_too_few_links_is_rejected():
    bb = small_backbone()
    bad = replace(bb, links=tuple(lk for lk in bb.links if lk.name != "p3-p4-2"))
    check = design_check(bad)
    assert not check.pops["p3"]["ok"] and not check.pops["p4"]["ok"]
    assert check.pops["p3"]["independent_exits"] == 3
    assert any("PoP p3 has only 3 independent exits" in e for e in check.errors)
    with pytest.raises(DesignError):
        require(bad)


def test_separate_paths_to_only_one_peer_is_rejected():
    # p1 has four links, but all of them go to p2; p2's other links reach p3
    links = [Link(f"p1-p2-{k}", "p1", "p2", 100, 10) for k in range(4)]
    links += [Link(f"p2-p3-{k}", "p2", "p3", 100, 10) for k in range(2)]
    bb = Backbone(pops=small_backbone().pops[:3], regions=(), links=tuple(links))
    check = design_check(bb)
    assert check.pops["p1"]["peers"] == ["p2"]
    with pytest.raises(DesignError, match=r"PoP p1 reaches 1 PoP\(s\) \(p2\)"):
        require(bb)


def test_single_homed_region_is_rejected():
    bb = small_backbone()
    bad = replace(bb, regions=(Region("ra", ("p1",)), bb.regions[1]))
    with pytest.raises(DesignError) as err:
        require(bad)
    assert err.value.node == "ra"


def test_region_homed_to_unknown_pop_is_rejected():
    bb = small_backbone()
    bad = replace(bb, regions=(Region("ra", ("p1", "nowhere")), bb.regions[1]))
    assert not design_check(bad).regions["ra"]["ok"]


def test_link_delay_from_length():
    assert Link("x", "a", "b", 10, 1000).delay_ms == 5.0


# -- the count against the search it replaced -------------------------------------------
def enumerated_paths(g: nx.MultiGraph, p: str, q: str, want: int) -> int:
    """The design check as it was (the oracle): the risk units of every simple path p -> q,
    the smallest sets, and a depth-first packing of up to ``want`` disjoint ones.
    Exponential: it never ended on a complete graph of 9 PoPs."""
    sets = set()
    for path in nx.all_simple_edge_paths(g, p, q):
        sets.add(frozenset().union(*(g.edges[a, b, key]["units"] for a, b, key in path)))
    kept: list[frozenset[str]] = []
    for s in sorted(sets, key=len):
        if not any(k <= s for k in kept):
            kept.append(s)
    best = 0

    def dfs(start: int, used: frozenset[str], count: int) -> bool:
        nonlocal best
        best = max(best, count)
        if best >= want:
            return True
        return any(not (kept[i] & used) and dfs(i + 1, used | kept[i], count + 1)
                   for i in range(start, len(kept)))

    dfs(0, frozenset(), 0)
    return best


def random_backbone(rng: random.Random) -> Backbone:
    """A dense multigraph of 2-7 PoPs (parallel links, a link from a PoP to itself) and up
    to five risk groups of random links: groups that hang together, fall apart, overlap,
    lie within one another."""
    n, m = rng.randint(2, 7), rng.randint(1, 14)
    pops = tuple(Pop(f"p{i}", "x") for i in range(n))
    links = tuple(Link(f"l{k}", f"p{rng.randrange(n)}", f"p{rng.randrange(n)}", 100, 10)
                  for k in range(m))
    groups = tuple(RiskGroup(f"g{j}", "conduit", tuple(
        rng.sample([lk.name for lk in links], rng.randint(1, min(4, m)))))
        for j in range(rng.randint(0, 5)))
    return Backbone(pops, (), links, groups)


@pytest.mark.parametrize("seed", range(6))
def test_the_count_is_the_enumerations_on_random_dense_backbones(seed):
    """Every pair of PoPs of 60 random backbones (a seed each case), counted up to 4 and
    to 10: the flows and their bounded search give what listing every path gave."""
    rng = random.Random(seed)
    for _ in range(60):
        bb = random_backbone(rng)
        g = pop_graph(bb)
        names = [p.name for p in bb.pops]
        for want in (4, 10):
            for i, p in enumerate(names):
                for q in names[i + 1:]:
                    assert separate_paths(g, p, q, want) == enumerated_paths(g, p, q, want), (
                        seed, bb, p, q, want)


def shipped_backbones() -> dict[str, Backbone]:
    found = {"default": default_backbone(), "small": small_backbone()}
    for path in sorted(REPO.glob("labs/lab07_*/*/backbone.yaml")):
        found[str(path.relative_to(REPO))] = Backbone.from_dict(
            yaml.safe_load(path.read_text())["backbone"])
    return found


@pytest.mark.parametrize("name", sorted(shipped_backbones()))
def test_every_shipped_backbone_keeps_its_counts(name):
    """The same count for every pair as the enumeration, so the same verdict."""
    bb = shipped_backbones()[name]
    g = pop_graph(bb)
    check = design_check(bb)
    assert check.ok
    for p, entry in check.pops.items():
        for q, n in entry["separate_paths"].items():
            assert n == enumerated_paths(g, p, q, backbone_check.PATHS), (p, q)


# -- the check's work is bounded --------------------------------------------------------
def flows_bound() -> int:
    """Steps of a design check without a search, on a backbone at the caps: one network
    (a link an edge; a group a node reached from the ends of its links: 1 + 2 x ends
    arcs), every pair of PoPs at most PATHS + 1 breadth-first searches over all of its
    arcs, and reading the groups."""
    pops, links, groups = (backbone_check.MAX_POPS, backbone_check.MAX_LINKS,
                           backbone_check.MAX_GROUPS)
    arcs = 2 * (links + groups + 4 * links)
    pairs = pops * (pops - 1) // 2
    return (pairs * (backbone_check.PATHS + 1) * (arcs + 1) + 4 * arcs + pops + 2 * groups
            + links * (groups + 1) + groups * (groups + links) + pairs * (links + 1))


def largest(shape: str, seed: int = 1) -> Backbone:
    """A backbone at the caps: MAX_POPS PoPs and MAX_LINKS links (a ring of parallel
    spans, chords drawn at random), with MAX_GROUPS cables of two parallel fibre pairs
    where asked."""
    rng = random.Random(seed)
    n, m = backbone_check.MAX_POPS, backbone_check.MAX_LINKS
    if shape == "chords":  # every span twice (four ways out of every PoP), then chords
        ends = [(i, (i + 1) % n) for i in range(n) for _ in range(2)]
        ends += [tuple(rng.sample(range(n), 2)) for _ in range(m - 2 * n)]
    else:  # every span of the ring four times (the searches cross the whole ring)
        ends = [(i, (i + 1) % n) for i in range(n) for _ in range(m // n)]
    links = tuple(Link(f"l{k}", f"p{a}", f"p{b}", 100, 10) for k, (a, b) in enumerate(ends))
    groups = ()
    if shape == "cables":  # the two fibre pairs of a span in one cable
        groups = tuple(RiskGroup(f"c{j}", "subsea-cable", (f"l{2 * j}", f"l{2 * j + 1}"))
                       for j in range(backbone_check.MAX_GROUPS))
    return Backbone(tuple(Pop(f"p{i}", "x") for i in range(n)), (), links, groups)


@pytest.mark.parametrize("shape", ["chords", "ring", "cables"])
def test_the_largest_backbone_checks_within_a_bound_on_its_steps(shape, monkeypatch):
    """At the caps, the flows alone stay within a bound computed from the caps, and that
    bound within the check's cap of steps: no backbone the lab accepts whose groups hang
    together and do not overlap is ever refused for its work (and the search of the
    others has the rest). Measured here, on a busy 2-core machine: 0.01 to 0.4 s for these,
    0.6 to 1.4 s to reach the cap (a backbone at the caps with 40 groups drawn at
    random)."""
    counted = []

    class Work(backbone_check._Work):
        def __init__(self, limit=None):
            super().__init__(limit)
            counted.append(self)

    monkeypatch.setattr(backbone_check, "_Work", Work)
    bb = largest(shape)
    assert len(bb.pops) == backbone_check.MAX_POPS and len(bb.links) == backbone_check.MAX_LINKS
    check = design_check(bb)
    assert all(entry["separate_paths"] for entry in check.pops.values())  # every pair counted
    assert 0 < counted[0].steps <= flows_bound() < backbone_check.MAX_WORK


def test_a_backbone_over_the_caps_is_refused_by_name():
    bb = largest("chords")
    more = replace(bb, pops=(*bb.pops, Pop("extra", "x")))
    with pytest.raises(DesignLimit, match=r"^pops: at most 32 PoPs"):
        design_check(more)
    more = replace(bb, links=(*bb.links, Link("extra", "p0", "p1", 100, 10)))
    with pytest.raises(DesignLimit, match=r"^links: at most 128 PoP-PoP links"):
        design_check(more)
