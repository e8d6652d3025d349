"""Scenario schema for adaptive routing and ECN: nested controller sections, training
congestion-control fields, seeds and the reference variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.scenario import load, parse
from testbed.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def base(**extra) -> dict:
    data = {"name": "t", "topology": {"planes": 1, "nodes": 4},
            "agents": {"enabled": False},
            "training": {"enabled": True, "ranks": [0, 1, 2, 3]}}
    data.update(extra)
    return data


def error_field(data: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        parse(data)
    return exc.value.field


def test_defaults_resolve_nested_sections() -> None:
    v = parse(base()).variants[0]
    c = v.controller
    assert c["mode"] == "ecmp" and c["telemetry_ms"] == 100 and c["prometheus_port"] == 0
    assert c["adaptive"] == {"interval_ms": 100, "imbalance": 0.2, "elephant_mbps": 1.0,
                            "place_tcp": True}
    assert c["ecn"]["mode"] == "off"
    assert c["ecn"]["classes"]["agents"] == {"min_kb": 20, "max_kb": 60, "probability": 0.1}
    assert v.training["pattern"] == "ring" and v.training["dcqcn"]["enabled"] is False
    assert v.agents["ecn"] is False


def test_yaml_off_is_mode_off() -> None:
    data = base(controller={"ecn": {"mode": False}})
    assert parse(data).variants[0].controller["ecn"]["mode"] == "off"
    assert error_field(base(controller={"ecn": {"mode": True}})) == "controller.ecn.mode"


def test_variant_overrides_deep_merge() -> None:
    data = base(controller={"ecn": {"mode": "controller",
                                    "classes": {"agents": {"min_kb": 5, "max_kb": 15}}}},
                variants=[{"name": "a"},
                          {"name": "b", "controller": {"ecn": {"classes": {
                              "collective": {"probability": 1.0}}}}}])
    a, b = parse(data).variants
    assert a.controller["ecn"]["classes"]["agents"]["min_kb"] == 5
    assert b.controller["ecn"]["classes"]["agents"]["max_kb"] == 15
    assert b.controller["ecn"]["classes"]["collective"] == {
        "min_kb": 20, "max_kb": 60, "probability": 1.0}


@pytest.mark.parametrize("controller, field", [
    ({"mode": "hash"}, "controller.mode"),
    ({"telemetry_ms": 5}, "controller.telemetry_ms"),
    ({"prometheus_port": 80}, "controller.prometheus_port"),
    ({"prometheus_port": "any"}, "controller.prometheus_port"),
    ({"prometheus_port": 70000}, "controller.prometheus_port"),
    ({"adaptive": {"imbalance": 0}}, "controller.adaptive.imbalance"),
    ({"adaptive": {"speed": 1}}, "controller.adaptive.speed"),
    ({"adaptive": 3}, "controller.adaptive"),
    ({"ecn": {"mode": "red"}}, "controller.ecn.mode"),
    ({"ecn": {"classes": {"bulk": {}}}}, "controller.ecn.classes.bulk"),
    ({"ecn": {"classes": {"agents": {"probability": 1.5}}}},
     "controller.ecn.classes.agents.probability"),
    ({"ecn": {"classes": {"collective": {"min_kb": 60, "max_kb": 20}}}},
     "controller.ecn.classes.collective.min_kb"),
])
def test_bad_controller_fields_named(controller: dict, field: str) -> None:
    assert error_field(base(controller=controller)) == field


def test_bad_field_in_variant_named_with_index() -> None:
    data = base(variants=[{"name": "a"}, {"name": "b", "controller": {
        "ecn": {"classes": {"agents": {"min_kb": 90}}}}}])
    assert error_field(data) == "variants[1].controller.ecn.classes.agents.min_kb"


@pytest.mark.parametrize("training, field", [
    ({"pattern": "hotspot"}, "training.pattern"),
    ({"pattern": "stride", "stride": 4}, "training.stride"),
    ({"stride": -1}, "training.stride"),
    ({"ecn": "yes"}, "training.ecn"),
    ({"cnp_interval_us": -1}, "training.cnp_interval_us"),
    ({"dcqcn": {"g": 0}}, "training.dcqcn.g"),
    ({"dcqcn": {"f": 1.5}}, "training.dcqcn.f"),
    ({"dcqcn": {"timer_us": 1}}, "training.dcqcn.timer_us"),
    ({"dcqcn": {"min_rate_mbps": 500}}, "training.dcqcn.min_rate_mbps"),
    ({"dcqcn": {"warp": 1}}, "training.dcqcn.warp"),
])
def test_bad_training_fields_named(training: dict, field: str) -> None:
    data = base()
    data["training"].update(training)
    assert error_field(data) == field


def test_agents_ecn_must_be_bool() -> None:
    data = base()
    data["agents"]["ecn"] = 1
    assert error_field(data) == "agents.ecn"


def test_seeds() -> None:
    assert parse(base(seed=7)).run_seeds == (7,)
    assert parse(base(seeds=[1, 2, 3])).run_seeds == (1, 2, 3)
    assert error_field(base(seeds=[1, 1])) == "seeds"
    assert error_field(base(seeds=[])) == "seeds"
    assert error_field(base(seeds=[1, "2"])) == "seeds[1]"
    assert error_field(base(seeds=3)) == "seeds"


def test_reference_variant() -> None:
    data = base(variants=[{"name": "ecmp"},
                          {"name": "reference", "reference": True,
                           "topology": {"leaves_per_plane": 1}}])
    ecmp, ref = parse(data).variants
    assert not ecmp.reference and ref.reference
    assert error_field(base(variants=[{"name": "a", "reference": True}])) == \
        "variants[0].reference"
    assert error_field(base(variants=[{"name": "a"}, {"name": "b", "reference": 1}])) == \
        "variants[1].reference"


@pytest.mark.parametrize("name", ["ecmp-vs-adaptive", "ecn-tuning"])
def test_shipped_scenarios_validate(name: str) -> None:
    scenario = load(REPO / "scenarios" / f"{name}.yaml")
    assert len(scenario.run_seeds) >= 3
    assert len(scenario.variants) >= 3
