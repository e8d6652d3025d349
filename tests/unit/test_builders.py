"""Topology builders: fat-tree, explicit graph, dotted-path builders, one entry point."""

from __future__ import annotations

from collections import Counter

import pytest

from topologies.build import BUILDERS, SHIPPED, build_topology, resolve
from topologies.fattree import build_fattree
from topologies.params import ParamError
from topologies.spec import IFNAME_MAX, FabricSpec, TopologyError

P = "tb1a2b"


def neighbours(spec: FabricSpec, name: str) -> list[str]:
    return [lk.b if lk.a == name else lk.a for lk in spec.links
            if lk.kind == "fabric" and name in (lk.a, lk.b)]


def check_wiring(spec: FabricSpec) -> None:
    """What every spec must keep: unique names and ports that fit, ports used once."""
    names = [sw.name for sw in spec.switches] + [i.name for i in spec.interfaces()]
    names += [p.ifname for p in spec.switch_ports()]
    assert len(names) == len(set(names))
    assert max(map(len, names)) <= IFNAME_MAX
    assert len({sw.dpid for sw in spec.switches}) == len(spec.switches)
    ports = Counter((p.switch, p.port) for p in spec.switch_ports())
    assert max(ports.values()) == 1


# -- fat-tree ------------------------------------------------------------------------------
def test_k4_fat_tree_is_the_hedera_testbed():
    spec = build_fattree(prefix=P, k=4)
    assert spec.counts() == {"switches": 20, "hosts": 16, "links": 48}
    by_role = Counter(sw.role for sw in spec.switches)
    assert by_role == {"edge": 8, "aggregation": 8, "core": 4}
    assert {sw.role: sw.tier for sw in spec.switches} == {"edge": 0, "aggregation": 1,
                                                          "core": 2}
    for sw in spec.switches:
        up = [n for n in neighbours(spec, sw.name) if spec.switch(n).tier > sw.tier]
        down = [n for n in neighbours(spec, sw.name) if spec.switch(n).tier < sw.tier]
        hosts = [i for i in spec.interfaces() if i.switch == sw.name]
        if sw.role == "edge":  # k/2 hosts down, every aggregation switch of its pod up
            assert len(hosts) == 2 and len(up) == 2
            assert {spec.switch(n).group for n in up} == {sw.group}
        elif sw.role == "aggregation":  # k/2 edges of its pod down, k/2 cores up
            assert len(down) == 2 and len(up) == 2 and not hosts
        else:  # one aggregation switch of every pod
            assert len(down) == 4 and {spec.switch(n).group for n in down} == {0, 1, 2, 3}
    check_wiring(spec)


def test_fat_tree_planes_share_the_hosts():
    spec = build_fattree(prefix=P, k=4, planes=2, link_mbps=20)
    assert spec.counts() == {"switches": 40, "hosts": 16, "links": 96}
    assert all(len(h.interfaces) == 2 for h in spec.hosts)
    assert {lk.mbps for lk in spec.links} == {20.0}
    assert spec.hosts[15].interface(1, 0).ip == "10.1.0.16"
    check_wiring(spec)


@pytest.mark.parametrize("k, switches, hosts", [(2, 5, 2), (6, 45, 54), (8, 80, 128)])
def test_fat_tree_sizes(k, switches, hosts):
    spec = build_fattree(prefix=P, k=k)
    assert (len(spec.switches), len(spec.hosts)) == (switches, hosts)
    check_wiring(spec)


@pytest.mark.parametrize("section, field", [
    ({"builder": "fat-tree", "k": 5}, "k"),
    ({"builder": "fat-tree", "k": 12}, "k"),
    ({"builder": "fat-tree", "k": 4, "nodes": 8}, "nodes"),
    ({"builder": "fat-tree", "k": 4, "queue_kb": 10}, "queue_kb"),
])
def test_fat_tree_errors_name_the_field(section, field):
    with pytest.raises(ParamError) as err:
        build_topology(section, P)
    assert err.value.field == field and "\n" not in str(err.value)


def test_fat_tree_prefix_too_long():
    with pytest.raises(TopologyError) as err:
        build_fattree(prefix="tblonger1", k=8, planes=10)
    assert err.value.field == "prefix"


# -- explicit graph --------------------------------------------------------------------------
def two_tier(**extra) -> dict:
    nodes = {"s1": {"kind": "switch"}, "l1": {"kind": "switch"}, "l2": {"kind": "switch"},
             "h1": {"kind": "host"}, "h2": {"kind": "host"}, "h3": {"kind": "host"}}
    links = [{"endpoints": ["h1", "l1"]}, {"endpoints": ["h2", "l2"]},
             {"endpoints": ["h3", "l2"]}, {"endpoints": ["l1", "s1"]},
             {"endpoints": ["l2", "s1"]}]
    return {"nodes": nodes, "links": links, **extra}


def test_explicit_graph_tiers_roles_ports_addresses():
    spec = build_topology(two_tier(), P)
    assert spec.builder == "explicit"
    assert [(s.name[len(P):], s.tier, s.role) for s in spec.switches] == [
        ("s1", 1, "spine"), ("l1", 0, "leaf"), ("l2", 0, "leaf")]
    assert [h.interface(0, 0).ip for h in spec.hosts] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert spec.port_roles()[P + "s1e1"] == "spine_downlink"
    assert spec.port_roles()[P + "l2e3"] == "leaf_uplink"
    check_wiring(spec)


def test_explicit_tiers_and_roles_as_given_and_planes():
    section = two_tier()
    section["nodes"]["s1"] = {"kind": "switch", "tier": 2, "role": "core"}
    spec = build_topology(section, P)
    assert (spec.switch(P + "s1").tier, spec.switch(P + "s1").role) == (2, "core")
    # two planes: every host on both
    nodes = {"a0": {"kind": "switch"}, "b0": {"kind": "switch", "plane": 1},
             "h1": {"kind": "host"}, "h2": {"kind": "host"}}
    links = [{"endpoints": [h, s]} for h in ("h1", "h2") for s in ("a0", "b0")]
    spec = build_topology({"nodes": nodes, "links": links}, P)
    assert spec.planes == 2 and spec.rails == 1
    assert spec.hosts[1].interface(1, 0).ip == "10.1.0.2"


def mutate(change) -> dict:
    section = two_tier()
    change(section)
    return section


@pytest.mark.parametrize("change, field, words", [
    (lambda s: s["links"].append({"endpoints": ["h1", "x9"]}), "links[5].endpoints[1]",
     "unknown node 'x9'"),
    (lambda s: s["links"].append({"endpoints": ["l1", "l1"]}), "links[5].endpoints",
     "to itself"),
    (lambda s: s["links"].append({"endpoints": ["h1", "h2"]}), "links[5].endpoints",
     "joins two hosts"),
    (lambda s: s["links"].append({"endpoints": ["s1", "l1"]}), "links[5]",
     "duplicates links[3]"),
    (lambda s: s["links"].append({"endpoints": ["s1"]}), "links[5].endpoints",
     "at least 2"),
    (lambda s: s["links"].pop(4), "nodes.h2", "cannot reach h1 on plane 0"),
    (lambda s: s["links"].pop(0), "nodes.h1", "has no link"),
    (lambda s: s["nodes"].update({"averyverylongname": {"kind": "switch"}}) or
     s["links"].append({"endpoints": ["averyverylongname", "s1"]}),
     "nodes.averyverylongname", "15 characters"),
    (lambda s: s["nodes"].update({"Spine": {"kind": "switch"}}), "nodes.Spine", "lowercase"),
    (lambda s: s["nodes"]["h1"].update({"tier": 0}), "nodes.h1", "for switches"),
    (lambda s: s["nodes"]["h1"].update({"kind": "router"}), "nodes.h1.kind", "must be one of"),
    (lambda s: s["nodes"]["s1"].update({"plane": 1}), "links[3].endpoints",
     "joins plane 0"),
    (lambda s: s["nodes"]["h1"].update({"plane": 1}), "links[0].endpoints[0]",
     "on plane 1"),
    (lambda s: s["links"].append({"endpoints": ["h3", "l1"]}), "nodes.h3",
     "same interfaces"),
    (lambda s: s["nodes"].update({"l1e1": {"kind": "switch"}}) or
     s["links"].append({"endpoints": ["l1e1", "s1"]}), "nodes", "name 'tb1a2bl1e1' twice"),
    (lambda s: s.update({"colour": "red"}), "colour", "unknown field"),
    (lambda s: s["links"][0].update({"mbps": 0}), "links[0].mbps", "or more"),
])
def test_explicit_graph_errors_are_one_line_naming_the_field(change, field, words):
    with pytest.raises(ParamError) as err:
        build_topology(mutate(change), P)
    assert err.value.field == field, str(err.value)
    assert words in err.value.reason and "\n" not in str(err.value)


# -- dotted-path builders and the entry point ------------------------------------------------
def test_dotted_path_builder_from_examples(plugins_load):
    spec = build_topology({"builder": "examples.builders.ring:Ring", "switches": 5}, P)
    assert spec.counts() == {"switches": 5, "hosts": 10, "links": 15}
    assert {sw.tier for sw in spec.switches} == {0}
    assert "ring" in BUILDERS and "ring" not in SHIPPED  # registered under its name


@pytest.fixture
def own_builders(tmp_path, monkeypatch, plugins_load):
    """A module of builders in a folder on the import path: one returns no spec."""
    (tmp_path / "tbbuilders.py").write_text(
        "from topologies.build import Builder\n"
        "class NoSpec(Builder):\n"
        "    NAME = 'nospec'\n"
        "    @classmethod\n"
        "    def build(cls, params, prefix):\n"
        "        return {}\n"
        "class Shadow(Builder):\n"
        "    NAME = 'fat-tree'\n"
        "def build(prefix):\n"
        "    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("nospec", "ring"):  # another test's, loaded in this process
        BUILDERS.forget(name)
    yield
    for name in ("nospec", "ring"):
        BUILDERS.forget(name)


@pytest.mark.parametrize("section, words", [
    ({"builder": "examples.builders.nothere:Ring"}, "no module 'examples.builders.nothere'"),
    ({"builder": "examples.builders.ring:Missing"}, "is not a topologies.build.Builder"),
    ({"builder": "examples.builders.ring:Ring", "colour": 1}, "colour"),
    ({"builder": "builtins:dict"}, "not a Python source file"),
    ({"builder": "types:SimpleNamespace"}, "is not a topologies.build.Builder"),
    ({"builder": "examples.builders.ring:Ring", "switches": 2}, "switches: must be 3 or more"),
    ({"builder": "tbbuilders:build"}, "is not a topologies.build.Builder"),
    ({"builder": "tbbuilders:NoSpec"}, "NoSpec.build returned dict, not a FabricSpec"),
    ({"builder": "tbbuilders:Shadow"}, "named 'fat-tree', which another builder has"),
    ({"builder": "ring"}, "unknown builder 'ring'"),
])
def test_dotted_path_builder_errors(section, words, own_builders):
    with pytest.raises(ParamError) as err:
        build_topology(section, P)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_entry_point_defaults_and_inference():
    assert build_topology(None, P).builder == "leaf-spine"
    assert resolve({"nodes": 16})["builder"] == "leaf-spine"
    assert resolve(two_tier())["builder"] == "explicit"
    assert resolve({})["planes"] == 2  # the scenario default, as before
    for name in SHIPPED:
        schema = BUILDERS[name].Params.model_json_schema()
        assert schema["additionalProperties"] is False, name
        assert all("description" in f for f in schema["properties"].values()), name


def test_scenario_variant_may_switch_builder():
    from testbed.core.scenario import parse

    sc = parse({"name": "x", "agents": {"enabled": False},
                "topology": {"builder": "fat-tree", "k": 4, "link_mbps": 10},
                "variants": [{"name": "tree"},
                             {"name": "one", "reference": True,
                              "topology": {"builder": "leaf-spine", "planes": 1,
                                           "nodes": 16, "leaves_per_plane": 1}}]})
    specs = [v.fabric(P) for v in sc.variants]
    assert [s.builder for s in specs] == ["fat-tree", "leaf-spine"]
    assert [len(s.hosts) for s in specs] == [16, 16]
    with pytest.raises(Exception) as err:
        parse({"name": "x", "topology": {"builder": "fat-tree", "k": 3}})
    assert err.value.field == "topology.k"
