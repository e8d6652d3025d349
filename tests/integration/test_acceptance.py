"""Acceptance on a running lab, real frames through real switches: a fabric as built is
accepted; two NICs swapped between rails are named by both ends (and accepted again
once swapped back); a cut cable is named and nothing else; a link at a quarter of its
rate and a port losing 2 % are named by the link check and nothing else; a spine whose
forwarding drops every packet is named by the path check and nothing else."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import leftovers
from .test_lab import record_of, run_testbed

pytestmark = pytest.mark.ovs

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "lab-rails.yaml"


def accept(name: str, out: Path, *checks: str) -> tuple[int, str, dict]:
    done = run_testbed("accept", name, *(["--checks", ",".join(checks)] if checks else []))
    return done.returncode, done.stdout, json.loads((out / "acceptance.json").read_text())


@contextmanager
def lab(tmp_path: Path, letter: str) -> Iterator[tuple[str, dict, Path]]:
    """The test lab up (its name, record and results folder); down afterwards, nothing
    of it left."""
    name = f"{letter}{os.getpid() % 100000}"
    up = run_testbed("up", str(SCENARIO), "--name", name, "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    try:
        yield name, record, Path(record["out"])
    finally:
        down = run_testbed("down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(f"tb{record['run_id']}") == []


@pytest.fixture(scope="module")
def rails(tmp_path_factory) -> Iterator[tuple[str, dict, Path]]:
    """One test lab for the three tests below, in the file's order: each undoes its
    faults before it ends, but the last one's quarter-rate link and ECMP exclusion."""
    with lab(tmp_path_factory.mktemp("rails"), "a") as up:
        yield up


def excluded(result: dict) -> list[str]:
    return [c["link"] for c in result["checks"][0]["cables"] if c["verdict"] == "excluded"]


def test_cabling_is_checked_with_lldp_on_every_cable(rails):
    name, record, out = rails
    code, text, result = accept(name, out, "cabling")
    assert code == 0, text
    assert result["accepted"] and excluded(result) == []
    assert len(result["checks"][0]["cables"]) == 12  # 8 NIC cables, 4 between switches

    assert run_testbed("fault", name, "swap_rails", "n1p0r0").returncode == 0
    code, text, result = accept(name, out, "cabling")
    assert code == 1, text
    assert excluded(result) == ["n1-p0l0", "n1-p0l1"]
    assert result["checks"][0]["swapped"] == [["n1-p0l0", "n1-p0l1"]]
    assert "n1p0r0 hears p0l1e2, not p0l0e2" in text, text

    assert run_testbed("fault", name, "swap_rails", "n1p0r0").returncode == 0
    code, text, result = accept(name, out, "cabling", "links")  # a swap undone: nothing
    assert code == 0 and excluded(result) == [], text

    assert run_testbed("fault", name, "link_down", "p0l0-p0s0").returncode == 0
    try:
        code, text, result = accept(name, out, "cabling")
        assert code == 1 and excluded(result) == ["p0l0-p0s0"], text
        assert "hears nothing" in text
    finally:
        assert run_testbed("fault", name, "link_up", "p0l0-p0s0").returncode == 0
    code, text, result = accept(name, out, "cabling")  # the cable heard again
    assert code == 0 and excluded(result) == [], text


@pytest.mark.vm
def test_the_kernel_datapaths_switch_ports_hear_lldp(tmp_path):
    """The OVS kernel datapath takes every frame that arrives on its ports before a
    packet socket bound to one protocol sees it; the lab's sockets listen to all and
    filter (testbed.host.netns.packet_socket). Cabling on that datapath, in the lab VM
    (make vm-test): every cable heard both ways, and a swap named by both ends. (The
    link check's rates cannot be measured in a VM under software emulation: the
    senders fall behind, and the check says "not measured".)"""
    from testbed.host.capabilities import probe

    if probe().ovs_datapath != "kernel":
        pytest.skip("applies to the OVS kernel datapath (make vm-test); this host has the "
                    "userspace one, which the test above covers")
    with lab(tmp_path, "k") as (name, record, out):
        code, text, result = accept(name, out, "cabling")
        assert code == 0 and excluded(result) == [], text
        assert len(result["checks"][0]["cables"]) == 12
        assert run_testbed("fault", name, "swap_rails", "n1p0r0").returncode == 0
        code, text, result = accept(name, out, "cabling")
        assert code == 1 and excluded(result) == ["n1-p0l0", "n1-p0l1"], text
        assert result["checks"][0]["swapped"] == [["n1-p0l0", "n1-p0l1"]]


def _check(result: dict, name: str) -> dict:
    return next(c for c in result["checks"] if c["check"] == name)


def test_links_and_paths_are_measured_and_what_fails_is_named(rails):
    name, record, out = rails
    code, text, result = accept(name, out, "links", "paths")
    assert code == 0 and result["excluded_links"] == [], text
    rates = _check(result, "links")
    assert len(rates["links"]) == 12
    for lk in rates["links"]:  # both ways, near the rate (sent at 0.97 of it), within
        for way in lk["directions"]:  # the rule's loss (a frame lost here or there)
            assert way["rate_mbps"] >= 0.9 * way["mbps"] and way["loss"] <= 0.005, lk
    routes = _check(result, "paths")
    assert len(routes["paths"]) == 4  # two leaves, each way over each spine
    assert all(p["verdict"] == "passes" and p["lost"] == 0 for p in routes["paths"])

    # a link trained down to a quarter, a host port losing 2 %
    assert run_testbed("fault", name, "rate", "p0l1-p0s0",
                       "--rate-mbps", "25").returncode == 0
    assert run_testbed("fault", name, "degrade", "n2-p0l1", "--loss", "0.02").returncode == 0
    code, text, result = accept(name, out, "links", "paths")
    assert code == 1, text
    assert result["excluded_links"] == ["n2-p0l1", "p0l1-p0s0"], text
    assert result["excluded_switches"] == [], text
    bad = {lk["link"]: lk for lk in _check(result, "links")["links"]
           if lk["verdict"] == "excluded"}
    for way in bad["p0l1-p0s0"]["directions"]:  # at a quarter, the rest lost
        assert 20 < way["rate_mbps"] < 30 and way["loss"] > 0.6, bad["p0l1-p0s0"]
    for way in bad["n2-p0l1"]["directions"]:
        assert 0.005 < way["loss"] < 0.06, bad["n2-p0l1"]
    # the paths left: over p0s1 only, both pass
    assert [p["via"] for p in _check(result, "paths")["paths"]] == [["p0s1"], ["p0s1"]]
    assert run_testbed("fault", name, "rate_restore", "p0l1-p0s0").returncode == 0
    assert run_testbed("fault", name, "restore", "n2-p0l1").returncode == 0

    # a spine that drops every IPv4 packet: its links pass alone, its paths do not
    spine = f"{record['prefix']}p0s1"
    subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "add-flow", spine,
                    "cookie=0xbad,priority=65000,ip,actions=drop"], check=True)
    code, text, result = accept(name, out, "links", "paths")
    assert code == 1, text
    assert result["excluded_links"] == [] and result["excluded_switches"] == ["p0s1"], text
    failing = [p for p in _check(result, "paths")["paths"] if p["verdict"] == "fails"]
    assert [p["via"] for p in failing] == [["p0s1"], ["p0s1"]], text
    subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", spine,
                    "cookie=0xbad/-1"], check=True)
    code, text, result = accept(name, out, "paths")
    assert code == 0, text


def _route_ports(bridge: str) -> set[int]:
    """The ports a switch's IPv4 routes may leave by (outputs and ECMP bundle members)."""
    flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge],
                           capture_output=True, text=True, check=True).stdout
    ports: set[int] = set()
    for line in flows.splitlines():
        if "nw_dst=" not in line or "actions=" not in line:
            continue
        actions = line.split("actions=", 1)[1]
        ports |= {int(p) for p in re.findall(r"output:(\d+)", actions)}
        for members in re.findall(r"members:([\d,]+)", actions):
            ports |= {int(p) for p in members.split(",")}
    return ports


def test_a_throttled_nic_fails_the_system_test_and_exclusion_reroutes(rails):
    """A NIC that sends its first half second's worth (3.1 MB at 50 Mb/s) at full rate
    and then at a quarter passes the link check (3 MB each way) and is the system test's
    outlier (about 11 MB a NIC); a quarter-rate link, excluded, leaves the
    ECMP set of the leaf (the controller restarted on the accepted fabric)."""
    name, record, out = rails
    code, text, result = accept(name, out, "links", "system")
    assert code == 0 and result["system"] == "passes", text
    run, = _check(result, "system")["runs"]
    assert run["complete"] and len(run["nodes"]) == 4 and run["ratio"] <= 2.0, run

    assert run_testbed("fault", name, "throttle", "n2p0r0", "--rate-mbps", "12.5",
                       "--burst-kb", "3125").returncode == 0
    code, text, result = accept(name, out, "links", "system")
    assert code == 1, text
    assert result["excluded_links"] == [], text  # the short test passes it
    assert result["excluded_nodes"] == ["n2"], text
    test = _check(result, "system")
    assert [n["node"] for n in test["nodes"]] == ["n2"], text
    again = test["runs"][1]
    assert again["nodes"] == ["n0", "n1", "n3"] and again["complete"], text
    assert run_testbed("fault", name, "throttle_restore", "n2p0r0").returncode == 0

    leaf, spine = f"{record['prefix']}p0l1", f"{record['prefix']}p0s0"
    spec = json.loads(Path(record["spec"]).read_text())
    port = next(lk["a_port"] for lk in spec["links"]
                if lk["a"] == leaf and lk["b"] == spine)
    assert port in _route_ports(leaf)
    assert run_testbed("fault", name, "rate", "p0l1-p0s0",
                       "--rate-mbps", "25").returncode == 0
    done = run_testbed("accept", name, "--checks", "links", "--exclude")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "excluded from every ECMP set: p0l1-p0s0" in done.stdout, done.stdout
    assert port not in _route_ports(leaf)


def test_accept_of_no_lab_is_one_line_and_exit_2():
    done = run_testbed("accept", "no-such-lab")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    done = run_testbed("accept", "no-such-lab", "--checks", "cabling,wires")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--checks" in done.stderr and "wires" in done.stderr


def test_a_scenario_plants_accepts_excludes_and_runs_its_workload_on_what_is_left(tmp_path):
    """A scenario's acceptance step: a swap planted where the seed puts it (on one of the
    ring's nodes, never the spare), found by the cabling check, the node's rank moved to
    the spare, the training ring then runs; the report says so; nothing is left."""
    scenario = tmp_path / "accept.yaml"
    scenario.write_text(SCENARIO.read_text().replace(
        "training: {enabled: true, ranks: [0, 1, 2, 3], bytes: 200000, rate_mbps: 20}",
        "training: {enabled: true, ranks: [0, 1, 2], bytes: 200000, rate_mbps: 20}\n"
        "acceptance: {enabled: true, checks: [cabling, links], spares: [3],\n"
        "             plant: [{action: swap_rails}]}"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run", str(scenario),
                           "--out", str(out), "--duration", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run, = json.loads((out / "summary.json").read_text())["runs"]
    acc = run["acceptance"]
    swapped, = acc["planted"]
    node = swapped["target"].split("p")[0]
    assert node in ("n0", "n1", "n2") and swapped["action"] == "swap_rails"
    assert acc["score"]["missed"] == [] and acc["score"]["extra"] == [], acc["score"]
    assert acc["excluded_nodes"] == [node] and acc["moved"] == {node: "n3"}
    assert run["training"]["iterations"] > 0
    assert "## Acceptance" in (out / "report.md").read_text()
    assert leftovers(f"tb{run['run_id']}") == []


def test_a_lab_runs_its_scenarios_acceptance_step_before_it_is_handed_over(tmp_path):
    """``testbed up`` of a scenario with an ``acceptance:`` step: the planted fault is
    made and named before the lab is up; the lab's record says what was excluded, and
    the rank on the excluded node is dropped from the training it would run."""
    scenario = SCENARIO.parent / "lab-rails-accepted.yaml"
    name = f"s{os.getpid() % 100000}"
    up = run_testbed("up", str(scenario), "--name", name, "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    try:
        assert record["acceptance"]["planted"] == [
            {"at_s": 0, "action": "link_down", "target": "n1-p0l1"}]
        assert record["acceptance"]["excluded_links"] == ["n1-p0l1"]
        assert record["acceptance"]["excluded_nodes"] == ["n1"]
        assert record["acceptance"]["moved"] == {"n1": None}  # no spare: the rank dropped
        result = json.loads((Path(record["out"]) / "acceptance.json").read_text())
        assert excluded(result) == ["n1-p0l1"] and not result["accepted"]
    finally:
        down = run_testbed("down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(f"tb{record['run_id']}") == []
