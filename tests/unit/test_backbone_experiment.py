"""Validation of the scenario's ``backbone:`` section (pure: touches nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.errors import ConfigError
from testbed.experiments.backbone.schema import validate
from topologies.backbone import small_backbone

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "backbone-failover.yaml"


def test_scenario_file_validates():
    data = yaml.safe_load(SCENARIO.read_text())
    cfg = validate(data["backbone"])
    assert cfg["design_check"]["ok"]
    assert {"default", "fast"} <= set(cfg["timers"])
    actions = {f["action"] for f in cfg["faults"]}
    assert {"cut_link", "cut_risk_group", "fail_pop"} <= actions
    assert all(f["at_s"] < data["duration_s"] for f in cfg["faults"])


def test_defaults_filled():
    cfg = validate({})
    assert cfg["probe_rate_pps"] == 200 and cfg["faults"] == [] and cfg["shape"] is True
    assert cfg["timers"]["fast"]["bfd_ms"] < cfg["timers"]["default"]["bfd_ms"]


@pytest.mark.parametrize("section, field", [
    ({"faults": [{}, {}, {"at_s": 1, "action": "cut_link", "target": "x"}]}, "faults[0].at_s"),
    ({"faults": [{"at_s": 1, "action": "cut_link", "target": "nyc-ams"},
                 {"at_s": 2, "action": "melt", "target": "x"}]}, "faults[1].action"),
    ({"faults": [{"at_s": 1, "action": "cut_risk_group", "target": "nyc-ams"}]},
     "faults[0].target"),
    ({"faults": [{"at_s": 1, "action": "fail_pop", "target": "us-east"}]}, "faults[0].target"),
    ({"timers": {"fast": {"bfd_ms": 1}}}, "timers.fast.bfd_ms"),
    ({"timers": {"fast": {"hello_s": 5, "dead_s": 5}}}, "timers.fast.dead_s"),
    ({"timers": {"fast": {"jitter": 5}}}, "timers.fast.jitter"),
    ({"replication": [{"src": "us-east", "dst": "mars"}]}, "replication[0].dst"),
    ({"probe_rate_pps": 0}, "probe_rate_pps"),
    ({"topology": "huge"}, "topology"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_input_names_the_field(section, field):
    with pytest.raises(ConfigError) as err:
        validate(section)
    assert err.value.field == "backbone." + field


def _inline(bb, **changes) -> dict:
    data = {"topology": "inline", **bb.to_dict()}
    data.update(changes)
    return data


def test_inline_design_accepted():
    assert validate(_inline(small_backbone()))["design"]["pops"][0]["name"] == "p1"


def test_inline_design_breaking_the_rule_names_the_pop():
    bb = small_backbone()
    data = _inline(bb, risk_groups=[{"name": "duct", "kind": "conduit",
                                     "links": ["p1-p2-1", "p1-p2-2"]}])
    with pytest.raises(ConfigError) as err:
        validate(data)
    assert err.value.field in ("backbone.pops.p1", "backbone.pops.p2")
    assert "PoP p" in err.value.reason


def test_inline_single_homed_region_names_the_region():
    data = _inline(small_backbone())
    data["regions"][0]["pops"] = ["p1"]
    with pytest.raises(ConfigError) as err:
        validate(data)
    assert err.value.field == "backbone.regions.ra"


def test_inline_link_to_unknown_pop():
    data = _inline(small_backbone())
    data["links"][0]["b"] = "p9"
    with pytest.raises(ConfigError) as err:
        validate(data)
    assert err.value.field == "backbone.links[0]"


@pytest.mark.parametrize(("fault", "field"), [
    ({"action": "degrade_link", "target": "nyc-ams"}, "faults[0].loss"),
    ({"action": "degrade_link", "target": "nyc-ams", "loss": 0}, "faults[0].loss"),
    ({"action": "degrade_link", "target": "nyc-ams", "loss": 1.5}, "faults[0].loss"),
    ({"action": "degrade_link", "target": "nyc-ams", "loss": "5%"}, "faults[0].loss"),
    ({"action": "cut_link", "target": "nyc-ams", "loss": 0.1}, "faults[0].loss"),
    ({"action": "restore_degraded_link", "target": "nyc-ams", "loss": 0.1}, "faults[0].loss"),
    ({"action": "degrade_link", "target": "dxb", "loss": 0.1}, "faults[0].target"),
])
def test_degrade_link_loss_checked(fault, field):
    with pytest.raises(ConfigError) as err:
        validate({"faults": [{"at_s": 1, **fault}]})
    assert err.value.field == "backbone." + field


def test_degrade_link_accepted():
    cfg = validate({"faults": [
        {"at_s": 1, "action": "degrade_link", "target": "nyc-ams", "loss": 0.05},
        {"at_s": 2, "action": "restore_degraded_link", "target": "nyc-ams"}]})
    assert cfg["faults"][0]["loss"] == 0.05
    assert "loss" not in cfg["faults"][1]


def test_loss_rule_rendered():
    from testbed.host.nft import loss_rules

    text = loss_rules("tb1a2bloss4", "tb1a2bl4b", 0.1)
    assert text.startswith("table inet tb1a2bloss4 {")
    assert 'oifname "tb1a2bl4b" numgen random mod 1000 < 100 drop' in text
    assert "hook postrouting" in text and "policy accept" in text
    assert "< 1000 drop" in loss_rules("t", "i", 1.0)
    assert "< 1 drop" in loss_rules("t", "i", 0.0001)  # never rounds to "drop nothing"


# -- a backbone topology of one's own ------------------------------------------------------
@pytest.fixture
def own_backbones(tmp_path, monkeypatch, plugins_load):
    """A module of backbone topologies on the import path: one breaks each rule."""
    (tmp_path / "tbbackbones.py").write_text(
        "from topologies.backbone import Backbone, BackboneTopology, Link, small_backbone\n"
        "import dataclasses\n"
        "class NotOne(BackboneTopology):\n"
        "    NAME = 'not-one'\n"
        "    @classmethod\n"
        "    def build(cls):\n"
        "        return {}\n"
        "class BadName(BackboneTopology):\n"
        "    NAME = 'bad-name'\n"
        "    @classmethod\n"
        "    def build(cls):\n"
        "        bb = small_backbone()\n"
        "        extra = Link('X y', 'p1', 'p3', 1, 1)\n"
        "        return dataclasses.replace(bb, links=bb.links + (extra,))\n"
        "class Stray(BackboneTopology):\n"
        "    NAME = 'stray'\n"
        "    @classmethod\n"
        "    def build(cls):\n"
        "        bb = small_backbone()\n"
        "        extra = Link('p1-p9', 'p1', 'p9', 1, 1)\n"
        "        return dataclasses.replace(bb, links=bb.links + (extra,))\n"
        "class Thin(BackboneTopology):\n"
        "    NAME = 'thin'\n"
        "    @classmethod\n"
        "    def build(cls):\n"
        "        bb = small_backbone()\n"
        "        return dataclasses.replace(bb, links=bb.links[1:])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    from topologies.backbone import TOPOLOGIES

    for name in ("not-one", "bad-name", "stray", "thin", "pop-ring"):
        TOPOLOGIES.forget(name)


def test_a_backbone_topology_of_ones_own_is_checked_as_inline(own_backbones):
    cfg = validate({"topology": "examples.backbones.pop_ring:PopRing",
                    "faults": [{"at_s": 1, "action": "fail_pop", "target": "den"}]})
    assert cfg["design_check"]["ok"] and len(cfg["design"]["pops"]) == 5
    assert cfg["topology"] == "examples.backbones.pop_ring:PopRing"


@pytest.mark.parametrize("topology, field, words", [
    ("tbbackbones:NotOne", "topology", "built dict, not a topologies.backbone.Backbone"),
    ("tbbackbones:BadName", "topology.links[8].name", "must be 1-16 of a-z"),
    ("tbbackbones:Stray", "topology.links[8]", "unknown PoP 'p9'"),
    ("tbbackbones:Thin", "pops.p1", "separate paths"),
    ("tbbackbones:Missing", "topology", "is not a topologies.backbone.BackboneTopology"),
    ("tbbackbones", "topology", "must be one of default, small"),
    ("nowhere.at.all:Ring", "topology", "no module 'nowhere'"),
])
def test_a_backbone_topology_of_ones_own_breaking_a_rule(own_backbones, topology, field,
                                                         words):
    with pytest.raises(ConfigError) as err:
        validate({"topology": topology})
    assert err.value.field == "backbone." + field, str(err.value)
    assert words in err.value.reason and "\n" not in str(err.value), str(err.value)


def test_validation_imports_no_backbone_topology_of_ones_own(tmp_path):
    """``testbed validate`` finds the module and checks it statically (a validating
    process refuses to import plug-ins: tests/unit/test_plugins.py)."""
    from testbed.core.scenario import validate as validate_file

    scenario = tmp_path / "bb.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "bb", "duration_s": 10,
        "backbone": {"topology": "examples.backbones.pop_ring:PopRing"}}))
    name, what = validate_file(scenario)
    assert name == "bb" and "examples.backbones.pop_ring:PopRing" in what
    assert "not loaded" in what
    scenario.write_text(yaml.safe_dump({
        "name": "bb", "duration_s": 10,
        "backbone": {"topology": "examples.backbones.pop_ring:Nope"}}))
    with pytest.raises(ConfigError) as err:
        validate_file(scenario)
    assert err.value.field == "backbone.topology" and "defines no 'Nope'" in err.value.reason
