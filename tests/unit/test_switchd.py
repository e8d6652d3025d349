"""The lab's own switch processes: the ``switches`` section, shard plans, tap names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.core.cli import main
from testbed.errors import BringUpError
from testbed.fabric.switchd import AUTO_SHARDS, SwitchSettings, plan, tunables
from topologies.build import build_topology
from topologies.leafspine import build_fabric

FAT_TREE = {"builder": "fat-tree", "k": 4}
DEFAULT = Path(__file__).resolve().parents[2] / "scenarios" / "agents-vs-training.yaml"


def test_defaults_are_the_hosts_switch_with_tuned_malloc():
    s = SwitchSettings()
    assert s.daemon == "host" and s.shards == "auto"
    assert not s.lab_daemons(kernel_datapath=False)
    lab = SwitchSettings.model_validate({"daemon": "lab"})
    assert lab.lab_daemons(kernel_datapath=False)
    assert not lab.lab_daemons(kernel_datapath=True)  # kernel bridges are the host's
    assert "glibc.malloc.trim_threshold=" in tunables(s.malloc)


@pytest.mark.parametrize("shards", ["switch", "pod", 1, 3, 20, "auto"])
def test_every_switch_is_in_exactly_one_process(shards):
    spec = build_topology(FAT_TREE, "tb0000")
    groups = plan(spec, shards)
    names = [n for g in groups for n in g]
    assert sorted(names) == sorted(sw.name for sw in spec.switches)
    assert all(groups)


def test_pod_keeps_a_pods_switches_together_and_the_cores_apart():
    spec = build_topology(FAT_TREE, "tb0000")
    groups = plan(spec, "pod")
    assert len(groups) == 5  # 4 pods of 2 edge + 2 aggregation, the 4 cores
    role = {sw.name: sw.role for sw in spec.switches}
    cores = [g for g in groups if {role[n] for n in g} == {"core"}]
    assert len(cores) == 1 and len(cores[0]) == 4
    assert all(len(g) == 4 for g in groups)


def test_auto_is_per_switch_on_small_fabrics_and_bounded_on_large_ones():
    small = build_topology(FAT_TREE, "tb0000")
    assert len(plan(small, "auto")) == len(small.switches)
    big = build_fabric(planes=8, leaves_per_plane=8, spines_per_plane=8, nodes=32,
                       prefix="tb0000")
    assert len(plan(big, "auto")) == AUTO_SHARDS
    assert len(plan(big, 1000)) == len(big.switches)  # never an empty process


@pytest.mark.parametrize("section, field", [
    ({"daemon": "mine"}, "switches.daemon"),
    ({"shards": 0}, "switches.shards"),
    ({"shards": "plane"}, "switches.shards"),
    ({"shards": True}, "switches.shards"),
    ({"ports": "tap"}, "switches.ports"),
    ({"malloc": {"arena_max": 65}}, "switches.malloc"),
    ({"malloc": {"perturb": 1}}, "switches.malloc"),
    ({"malloc": {"top_pad": -1}}, "switches.malloc"),
    ({"extra": 1}, "switches.extra"),
])
def test_bad_settings_are_one_line_naming_the_field_exit_2(tmp_path, capsys, section, field):
    data = yaml.safe_load(DEFAULT.read_text())
    data["switches"] = section
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err, err


def test_a_variant_may_choose_its_switch_processes(tmp_path, capsys):
    data = yaml.safe_load(DEFAULT.read_text())
    data["variants"][1]["switches"] = {"daemon": "lab", "shards": 2}
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(data))
    assert main(["validate", str(good)]) == 0
    data["variants"][1]["switches"] = {"shards": -3}
    good.write_text(yaml.safe_dump(data))
    assert main(["validate", str(good)]) == 2
    assert "variants[1].switches.shards" in capsys.readouterr().err


def test_a_userspace_fabric_warms_the_hosts_switch_with_a_bridge_of_its_own(monkeypatch):
    # bench/fresh_switch_bench.py measures why (the first datapath of a fresh daemon);
    # here: what it does to the host's Open vSwitch, and its error
    from testbed.fabric import net

    calls = []
    monkeypatch.setattr(net, "register", lambda run_id, kind, name: calls.append(
        ("register", run_id, kind, name)))

    class Root:
        code = 0

        def run(self, argv):
            calls.append(argv)
            return subprocess.CompletedProcess(argv, Root.code, "", "refused")

    monkeypatch.setattr(net, "RootHost", Root)
    net.warm_host_switch("tb1a2b", "1a2b")
    registered, add, delete = calls  # registered before it exists, deleted separately
    assert registered == ("register", "1a2b", "bridge", "tb1a2bwarm")
    assert add[:4] == ["ovs-vsctl", "--may-exist", "add-br", "tb1a2bwarm"]
    assert "datapath_type=netdev" in add and "external_ids:testbed_run=1a2b" in add
    assert delete == ["ovs-vsctl", "--if-exists", "del-br", "tb1a2bwarm"]
    Root.code = 1
    with pytest.raises(BringUpError, match="ovs-vsctl add-br tb1a2bwarm: refused"):
        net.warm_host_switch("tb1a2b", "1a2b")
