"""The ``workloads:`` list: validation, and agents/training as entries of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.core.scenario import load, parse
from testbed.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
TOPO = {"planes": 2, "nodes": 4, "leaves_per_plane": 2, "spines_per_plane": 2}
AGENTS = {"driver": 0, "services": {"retriever": 3, "tool": 2, "model": 3, "agent": 2}}


def scenario(*workloads: dict, **extra) -> dict:
    return {"name": "w", "topology": TOPO, "agents": {"enabled": False},
            "workloads": list(workloads), **extra}


def test_the_example_validates_and_folds_agents_into_their_section():
    sc = load(REPO / "examples" / "workloads.yaml")
    v, = sc.variants
    assert v.agents["enabled"] and v.agents["services"]["retriever"] == 3
    assert v.agents["concurrency"] == 4
    assert [w["kind"] for w in v.workloads] == ["command", "iperf3", "replay", "elephants"]
    assert v.workloads[1]["client"] == 1 and v.workloads[1]["server"] == 2


def test_an_agents_entry_is_the_agents_section():
    as_entry = parse(scenario({"kind": "agents", **AGENTS}))
    as_section = parse({"name": "w", "topology": TOPO, "agents": AGENTS})
    assert as_entry.variants[0].agents == as_section.variants[0].agents


def test_training_entry_and_host_by_index():
    sc = parse(scenario({"kind": "training", "ranks": [0, 3]},
                        {"kind": "command", "host": 2, "argv": ["true"]}))
    v, = sc.variants
    assert v.training["enabled"] and v.training["ranks"] == [0, 3]
    assert v.workloads[0]["host"] == 2


def test_a_variant_replaces_the_list():
    sc = parse(scenario({"kind": "command", "host": "n0", "argv": ["true"]},
                        variants=[{"name": "a"}, {"name": "b", "workloads": []}]))
    assert len(sc.variants[0].workloads) == 1 and sc.variants[1].workloads == ()


@pytest.mark.parametrize("entry, field", [
    ({"kind": "nope"}, "workloads[0].kind"),
    ({"host": "n0"}, "workloads[0].kind"),
    ({"kind": "command", "host": "n0"}, "workloads[0].argv"),
    ({"kind": "command", "host": "n9", "argv": ["true"]}, "workloads[0].host"),
    ({"kind": "command", "host": 7, "argv": ["true"]}, "workloads[0].host"),
    ({"kind": "command", "host": "n0", "argv": ["ping", "{n8}"]}, "workloads[0].argv[1]"),
    ({"kind": "command", "host": "n0", "argv": ["true"], "at_s": -1}, "workloads[0].at_s"),
    ({"kind": "iperf3", "client": "n0", "server": "n0"}, "workloads[0].server"),
    ({"kind": "iperf3", "client": "n0", "server": "n1", "plane": 2}, "workloads[0].plane"),
    ({"kind": "iperf3", "client": "n0", "server": "n1", "seconds": 0}, "workloads[0].seconds"),
    ({"kind": "replay", "host": "n0", "pcap": "/nonexistent.pcap"}, "workloads[0].pcap"),
    ({"kind": "replay", "host": "n0", "pcap": "examples/frames.pcap", "rail": 1},
     "workloads[0].rail"),
    ({"kind": "elephants", "pattern": "stride", "stride": 4}, "workloads[0].stride"),
    ({"kind": "elephants", "pattern": "swirl"}, "workloads[0].pattern"),
    ({"kind": "elephants", "pattern": "staggered", "edge_p": 0.6, "pod_p": 0.5},
     "workloads[0].pod_p"),
    ({"kind": "elephants", "pattern": "staggered", "edge_hosts": 2, "pod_hosts": 3},
     "workloads[0].pod_hosts"),
    ({"kind": "elephants", "pattern": "hotspot", "hotspots": 2, "hot_flows": 2},
     "workloads[0].hotspots"),
    ({"kind": "elephants", "pattern": "random", "hosts": [0, 9]}, "workloads[0].hosts[1]"),
    ({"kind": "elephants", "pattern": "staggered", "edge_p": 0.5}, "workloads[0].edge_hosts"),
    ({"kind": "elephants", "pattern": "random", "hosts": [1, 1]}, "workloads[0].hosts"),
    ({"kind": "agents", "driver": 9, "services": AGENTS["services"]}, "agents.driver"),
    ({"kind": "agents", "concurrency": 0}, "workloads[0].concurrency"),
])
def test_bad_entries_name_the_field(entry, field, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as err:
        parse(scenario(entry))
    assert err.value.field == field, str(err.value)


def test_two_agents_entries_are_refused():
    with pytest.raises(ConfigError) as err:
        parse(scenario({"kind": "agents", **AGENTS}, {"kind": "agents", **AGENTS}))
    assert err.value.field == "workloads[1].kind"


def test_workloads_in_a_variant_name_the_variant():
    data = scenario(variants=[{"name": "a", "workloads": [{"kind": "command"}]}])
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert err.value.field.startswith("variants[0].workloads[0]")
    yaml.safe_dump(data)  # the test's own data is plain YAML


def test_elephants_entry_and_its_flows():
    from testbed.workloads.kinds import elephant_flows, elephant_label

    sc = parse(scenario({"kind": "elephants", "pattern": "stride", "stride": 1}))
    entry, = sc.variants[0].workloads
    assert elephant_label(entry) == "stride1"
    assert elephant_flows(entry, 4, seed=1) == [(0, 1), (1, 2), (2, 3), (3, 0)]


@pytest.mark.parametrize("ecn", ["controller", "auto"])
def test_gff_refuses_controller_marking(ecn):
    with pytest.raises(ConfigError) as err:
        parse(scenario(controller={"mode": "gff", "ecn": {"mode": ecn}}))
    assert err.value.field == "controller.ecn.mode", str(err.value)
