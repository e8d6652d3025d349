"""The hosts' TCP congestion control (``agents.congestion_control``): its schema value, the
refusal of dctcp on a kernel without tcp_dctcp, and the route commands that apply it."""

from __future__ import annotations

import json
import subprocess
from contextlib import ExitStack

import pytest

from testbed.core.scenario import parse
from testbed.errors import BringUpError, ConfigError
from testbed.host.capabilities import Capabilities, format_report
from testbed.workloads import generators
from testbed.workloads.generators import congctl_route, set_congestion_control
from topologies.leafspine import build_fabric

TOPO = {"planes": 2, "nodes": 4, "leaves_per_plane": 2, "spines_per_plane": 2}
AGENTS = {"driver": 0, "services": {"retriever": 3, "tool": 2, "model": 3, "agent": 2}}
SLIM = ["reno", "cubic", "bbr"]  # this development machine's kernel


def caps(*available: str) -> Capabilities:
    return Capabilities(kernel="k", ovs_kernel_datapath=False, netem=False, htb=True,
                        red=False, fq_codel=False, macsec=False, nftables=True,
                        tcp_dctcp="dctcp" in available,
                        tcp_congestion_controls=list(available))


def scenario(**agents) -> dict:
    return {"name": "t", "topology": TOPO, "agents": {**AGENTS, **agents}}


def test_default_leaves_the_kernel_s_choice_and_dctcp_parses():
    assert parse(scenario()).variants[0].agents["congestion_control"] == "default"
    sc = parse(scenario(congestion_control="dctcp"))
    assert sc.variants[0].agents["congestion_control"] == "dctcp"


def test_an_agents_workload_entry_takes_it_too():
    sc = parse({"name": "t", "topology": TOPO, "agents": {"enabled": False},
                "workloads": [{"kind": "agents", **AGENTS, "congestion_control": "reno"}]})
    assert sc.variants[0].agents["congestion_control"] == "reno"


def test_an_unknown_algorithm_is_one_line_naming_the_field():
    with pytest.raises(ConfigError) as err:
        parse(scenario(congestion_control="vegas"))
    assert err.value.field == "agents.congestion_control"
    assert "'dctcp'" in err.value.reason and "'vegas'" in err.value.reason
    assert "\n" not in str(err.value)


def test_dctcp_is_refused_where_the_kernel_lacks_tcp_dctcp():
    data = {**scenario(), "variants": [
        {"name": "a"}, {"name": "b", "agents": {"congestion_control": "dctcp"}}]}
    experiment = parse(data).experiment
    experiment.check_host(caps(*SLIM, "dctcp"))
    with pytest.raises(ConfigError) as err:
        experiment.check_host(caps(*SLIM))
    assert err.value.field == "variants[1].agents.congestion_control"
    assert err.value.reason == ("'dctcp' needs the kernel's tcp_dctcp, which this kernel "
                                "lacks; available: reno cubic bbr")
    with pytest.raises(ConfigError):  # a probe that read no list: tcp_dctcp still decides
        experiment.check_host(caps())


def test_other_algorithms_must_be_in_the_kernel_s_list_when_it_is_known():
    experiment = parse(scenario(congestion_control="cubic")).experiment
    experiment.check_host(caps(*SLIM))
    experiment.check_host(caps())  # no list read: nothing to hold it against
    with pytest.raises(ConfigError) as err:
        experiment.check_host(caps("reno", "bbr"))
    assert err.value.field == "variants[0].agents.congestion_control"
    assert "available: reno bbr" in err.value.reason
    parse(scenario()).experiment.check_host(caps("reno"))  # default needs nothing


def test_doctor_and_backends_say_whether_dctcp_is_there():
    assert "tcp_dctcp            no" in format_report(caps(*SLIM))
    assert caps(*SLIM).backends()["host TCP"] == "reno, cubic, bbr (no tcp_dctcp)"
    assert caps("reno", "cubic", "dctcp").backends()["host TCP"] == "reno, cubic, dctcp"
    assert caps(*SLIM).to_dict()["tcp_congestion_controls"] == SLIM


KERNEL_ROUTE = {"dst": "10.0.0.0/24", "dev": "tb1n0p0r0", "protocol": "kernel",
                "scope": "link", "prefsrc": "10.0.0.1", "flags": []}


def test_a_connected_route_is_replaced_with_its_attributes_and_congctl():
    assert congctl_route(KERNEL_ROUTE, "dctcp") == [
        "ip", "route", "replace", "10.0.0.0/24", "dev", "tb1n0p0r0", "proto", "kernel",
        "scope", "link", "src", "10.0.0.1", "congctl", "dctcp"]


def test_a_gateway_route_keeps_its_metrics_and_loses_its_old_congctl():
    route = {"dst": "default", "gateway": "10.0.0.254", "dev": "tb1n0p0r0",
             "protocol": "static", "metric": 20, "flags": ["onlink"],
             "metrics": [{"mtu": 1400, "congestion": "cubic"}]}
    assert congctl_route(route, "dctcp") == [
        "ip", "route", "replace", "default", "via", "10.0.0.254", "dev", "tb1n0p0r0",
        "proto", "static", "metric", "20", "onlink", "mtu", "1400", "congctl", "dctcp"]


@pytest.mark.parametrize("route", [
    {"dst": "10.1.0.0/16", "flags": [], "nexthops": [{"gateway": "10.0.0.2", "dev": "a"}]},
    {**KERNEL_ROUTE, "metrics": [{"rtt": "20ms"}]},
])
def test_what_cannot_be_carried_over_is_refused(route):
    with pytest.raises(ValueError):
        congctl_route(route, "dctcp")


class FakeFabric:
    """Answers ``ip -j route show`` with each host's routes; records every command."""

    def __init__(self, routes: dict[str, list[dict]], fail: str | None = None, spec=None):
        self.routes, self.fail, self.spec = routes, fail, spec
        self.commands: list[tuple[str, list[str]]] = []

    def run(self, host: str, argv: list[str]) -> subprocess.CompletedProcess:
        self.commands.append((host, argv))
        if argv[:2] == ["ip", "-j"]:
            return subprocess.CompletedProcess(argv, 0, json.dumps(self.routes[host]), "")
        if argv[0] == "sysctl":
            return subprocess.CompletedProcess(argv, 0, "cubic\n", "")
        if argv[-1] == self.fail:
            return subprocess.CompletedProcess(argv, 2, "", "Error: Unknown tcp congestion "
                                                            "algorithm.\n")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_every_unicast_route_of_every_host_gets_the_algorithm():
    blackhole = {"type": "blackhole", "dst": "10.9.0.0/16", "flags": []}
    fabric = FakeFabric({"a": [KERNEL_ROUTE, blackhole],
                         "b": [{**KERNEL_ROUTE, "dev": "tb1n1p0r0"}]})
    set_congestion_control(fabric, ["a", "b"], "dctcp")
    replaced = [(host, argv[4:6]) for host, argv in fabric.commands if "replace" in argv]
    assert replaced == [("a", ["dev", "tb1n0p0r0"]), ("b", ["dev", "tb1n1p0r0"])]
    assert all(argv[-2:] == ["congctl", "dctcp"] for _, argv in fabric.commands
               if "replace" in argv)


def test_a_refused_route_names_the_host_and_the_kernel_s_words():
    fabric = FakeFabric({"a": [KERNEL_ROUTE]}, fail="dctcp")
    with pytest.raises(BringUpError, match=r"^a: .*dctcp.*10\.0\.0\.0/24.*Unknown tcp"):
        set_congestion_control(fabric, ["a"], "dctcp")


@pytest.mark.parametrize("algorithm, recorded", [("dctcp", "dctcp"), ("default", "cubic")])
def test_start_sets_it_in_every_host_and_records_it(tmp_path, algorithm, recorded):
    """Agents and training off: only the hosts' TCP is set up (for the workloads list)."""
    spec = build_fabric(prefix="tb0000", planes=2, nodes=4)
    routes = {h.name: [{**KERNEL_ROUTE, "dev": i.name, "prefsrc": i.ip} for i in h.interfaces]
              for h in spec.hosts}
    fabric = FakeFabric(routes, spec=spec)
    variant = parse({"name": "t", "topology": TOPO, "agents": {
        "enabled": False, "congestion_control": algorithm}}).variants[0]
    with ExitStack() as stack:
        work = generators.start(fabric, variant, out=tmp_path, pid_dir=tmp_path,
                               duration_s=1, seed=1, stack=stack)
    assert work.congestion_control == recorded
    replaced = {argv[5] for _, argv in fabric.commands if "replace" in argv}
    if algorithm == "default":
        assert replaced == set()
    else:
        assert replaced == {i.name for h in spec.hosts for i in h.interfaces}
