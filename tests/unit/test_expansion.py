"""Expansion's plan, without a fabric: the grown spec keeps everything that runs, a rack
is what it adds, bad racks and plants are refused with one line naming the field."""

from __future__ import annotations

import pytest

from testbed.acceptance.paths import flows, plan
from testbed.errors import ConfigError
from testbed.operations.expand import OldFabricProbes, grown_spec, planted_in, rack_of
from topologies.leafspine import build_fabric


def spec(**kw):
    args = {"prefix": "tbu1", "planes": 2, "nodes": 8, "leaves_per_plane": 2,
            "spines_per_plane": 2, **kw}
    return build_fabric(**args)


def test_a_grown_fabric_keeps_every_switch_host_port_and_address():
    old = spec()
    grown = grown_spec(old, 1, 4)
    assert set(old.switches) < set(grown.switches) and set(old.links) < set(grown.links)
    assert grown.hosts[:8] == old.hosts
    assert grown.params["uplink_mbps"] == old.params["uplink_mbps"]  # still 1:1
    rack = rack_of(old, grown)
    assert rack.switches == {"tbu1p0l2", "tbu1p1l2"}
    assert rack.hosts == {f"tbu1n{i}" for i in range(8, 12)}
    # a NIC a node a plane, and an uplink from each new leaf to each spine of its plane
    assert len(rack.links) == 4 * 2 + 2 * 2 and "p0l2-p0s1" in rack.links
    view = rack.view(grown)
    assert {lk.b for lk in view.links if lk.kind == "host"} == rack.switches


@pytest.mark.parametrize("leaves, nodes, field, says", [
    (0, 4, "--leaves", "must be a whole number of 1 or more"),
    (1, 3, "--nodes", "must be 4 (1 leaf of 4 nodes each"),
    (2, 4, "--nodes", "must be 8 (2 leaves of 4 nodes each"),
    (61, 244, "--nodes", "the grown fabric"),  # 252 nodes: over the builder's 250
])
def test_a_rack_that_is_not_one_of_this_fabric_is_refused(leaves, nodes, field, says):
    with pytest.raises(ConfigError) as err:
        grown_spec(spec(), leaves, nodes)
    assert err.value.field == field and says in err.value.reason


def test_rails_take_their_leaves_together():
    old = spec(rails=2, nodes=4)
    with pytest.raises(ConfigError, match="multiple of the fabric's 2 rails"):
        grown_spec(old, 1, 2)
    assert len(rack_of(old, grown_spec(old, 2, 4)).switches) == 4


def test_only_a_leaf_spine_grows():
    import dataclasses

    from topologies.spec import FabricSpec
    other: FabricSpec = dataclasses.replace(spec(), builder="fat-tree")
    with pytest.raises(ConfigError, match="leaf-spine"):
        grown_spec(other, 1, 4)


def test_plants_are_drawn_from_the_rack_and_named_targets_must_be_in_it():
    old = spec()
    rack = rack_of(old, grown_spec(old, 1, 4))
    drawn = planted_in(old, 1, 4, [{"action": "degrade"}, {"action": "rate"}], seed=3)
    for f in drawn:
        assert f["target"] in {n.replace("tbu1", "") for n in rack.links}, f
    assert drawn == planted_in(old, 1, 4, [{"action": "degrade"}, {"action": "rate"}], 3)
    with pytest.raises(ConfigError) as err:
        planted_in(old, 1, 4, [{"action": "degrade", "target": "n0-p0l0"}], seed=1)
    assert err.value.field.startswith("--plant[0]")


def test_the_rack_paths_are_those_from_and_to_its_leaves_with_delivery():
    old = spec()
    grown = grown_spec(old, 1, 4)
    rack = rack_of(old, grown)
    planned, _ = plan(grown, lambda i: True, (), rack.switches)
    assert planned and all(rack.switches & {p.src_leaf, p.dst_leaf} for p in planned)
    every, _ = plan(grown, lambda i: True)
    assert len(planned) < len(every)
    p = planned[0]
    last = flows([p], deliver=True)[p.dst.switch]
    assert f"actions=output:{p.dst.switch_port}" in last[-1]
    assert p.dst.switch not in flows([p])  # the route delivers, where there is one


def test_old_fabric_probes_cross_the_spines_on_every_rail():
    pairs = OldFabricProbes.__new__(OldFabricProbes)
    OldFabricProbes.__init__(pairs, spec(), host_pid=lambda name: 1)
    assert len(pairs.pairs) == 8  # 4 a plane: first leaf's hosts to the last leaf's
    assert all(a.switch != b.switch and a.plane == b.plane for a, b in pairs.pairs)
    one_group = OldFabricProbes(spec(rails=2, nodes=4, planes=1), host_pid=lambda n: 1)
    assert all(a.switch == b.switch and a.rail == b.rail for a, b in one_group.pairs)


@pytest.mark.parametrize("argv, says", [
    (["--plant", "melt"], "--plant[0]: unknown fault 'melt'"),
    (["--checks", "cabling,burn-in"], "--checks: unknown check 'burn-in'"),
])
def test_bad_expand_input_is_one_line_before_any_lab_is_asked(argv, says, capsys):
    from testbed.core import cli

    assert cli.main(["expand", "no-such-lab", "--leaves", "1", "--nodes", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_fabric_a_rack_cannot_join_is_refused_before_anything_is_made(tmp_path):
    from types import SimpleNamespace

    from testbed.core import layout
    from testbed.operations.expand import refuse

    status = tmp_path / "controller-events.jsonl"
    live = SimpleNamespace(controller=None, status=status, phantom_table=None)
    with pytest.raises(ConfigError, match="remote one"):
        refuse(live)
    live.controller = object()
    refuse(live)  # the lab's own controller, nothing else: welcome
    live.phantom_table = "tbu1phantom"
    with pytest.raises(ConfigError, match="phantom-queue"):
        refuse(live)
    live.phantom_table = None
    (tmp_path / layout.PFC_STORMS).mkdir()
    with pytest.raises(ConfigError, match="PFC"):
        refuse(live)
