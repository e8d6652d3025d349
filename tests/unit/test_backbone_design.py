"""The backbone model and its design rule (four separate paths, dual-homed regions)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from topologies.backbone import Backbone, Link, Region, RiskGroup, default_backbone, small_backbone
from topologies.backbone_check import DesignError, design_check, pop_graph, require, separate_paths


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
