"""The fault registry: every kind a class, parameters checked by its model, plug-ins."""

from __future__ import annotations

import pytest

from testbed.core.scenario import parse
from testbed.errors import ConfigError
from testbed.faults import kinds
from testbed.faults.fabric import needs, parse_faults
from testbed.host.capabilities import Capabilities
from topologies.build import build_topology

SPEC = build_topology({"planes": 1, "nodes": 4}, "tbdoc0")


def test_every_kind_is_registered_with_its_target():
    assert {"link_down", "link_flap", "switch_fail", "plane_fail", "rail_fail",
            "controller_kill", "degrade", "delay", "delay_restore", "rate",
            "rate_restore"} <= set(kinds.KINDS)
    assert kinds.KINDS["plane_fail"].TARGET == "plane"
    assert kinds.KINDS["controller_restart"].TARGET is None


def test_delay_and_rate_carry_their_parameters():
    faults = parse_faults([
        {"at_s": 1, "action": "delay", "target": "p0l0-p0s1", "delay_ms": 5, "jitter_ms": 1},
        {"at_s": 2, "action": "rate", "target": "n0-p0l0", "rate_mbps": 5},
        {"at_s": 3, "action": "rate_restore", "target": "n0-p0l0"}], SPEC)
    assert [(f.action, f.params) for f in faults] == [
        ("delay", {"delay_ms": 5.0, "jitter_ms": 1.0}), ("rate", {"rate_mbps": 5.0}),
        ("rate_restore", {})]
    assert needs(faults) == {"netem": "delay", "htb": "rate"}


@pytest.mark.parametrize("entry, field, words", [
    ({"at_s": 1, "action": "delay", "target": "p0l0-p0s1"}, "faults[0].delay_ms", "missing"),
    ({"at_s": 1, "action": "delay", "target": "p0l0-p0s1", "delay_ms": -1},
     "faults[0].delay_ms", "0 or more"),
    ({"at_s": 1, "action": "rate", "target": "p0l0-p0s1", "rate_mbps": 0},
     "faults[0].rate_mbps", "greater than 0"),
    ({"at_s": 1, "action": "rate", "target": "p0l0-p0s1", "rate_mbps": 5, "loss": 0.1},
     "faults[0].loss", "not used by rate"),
    ({"at_s": 1, "action": "rate", "target": "p0s9-p0l0", "rate_mbps": 5},
     "faults[0].target", "no link"),
    ({"at_s": 1, "action": "no.such:Kind", "target": "p0l0-p0s1"}, "faults[0].action",
     "no module 'no'"),
    ({"at_s": 1, "action": "json:loads", "target": "p0l0-p0s1"}, "faults[0].action",
     "not a testbed.faults.kinds.FaultKind"),
])
def test_bad_parameters_name_the_field(entry, field, words, plugins_load):
    with pytest.raises(ConfigError) as err:
        parse_faults([entry], SPEC)
    assert err.value.field == field and words in err.value.reason, str(err.value)


class Blackhole(kinds.FaultKind):
    """A plug-in kind (named by dotted path in the test below)."""

    NAME = "blackhole"
    PARAMS = kinds.LossParams

    def apply(self, faults, target, **params):
        return faults.degrade(target, params["loss"])


def test_a_plugin_kind_by_dotted_path_with_params(plugins_load):
    path = f"{__name__}:Blackhole"
    faults = parse_faults([{"at_s": 1, "action": path, "target": "p0l0-p0s1",
                            "params": {"loss": 1.0}}], SPEC)
    assert faults[0].action == "blackhole" and faults[0].params == {"loss": 1.0}
    assert kinds.KINDS.forget("blackhole") is Blackhole


def test_a_kernel_without_netem_refuses_delay_before_anything_starts():
    sc = parse({"name": "d", "topology": {"planes": 1, "nodes": 4}, "agents": {"enabled": False},
                "faults": [{"at_s": 1, "action": "delay", "target": "p0l0-p0s1",
                            "delay_ms": 5}]})
    caps = Capabilities(kernel="k", ovs_kernel_datapath=False, netem=False, htb=True,
                        red=False, fq_codel=False, macsec=False, nftables=True)
    with pytest.raises(ConfigError) as err:
        sc.experiment.check_host(caps)
    assert err.value.field == "variants[0].faults" and "netem" in err.value.reason
    caps.netem = True
    sc.experiment.check_host(caps)
