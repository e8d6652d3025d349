"""Root tests: an extra os-ken app from the scenario runs beside the lab's own, and a
remote controller (one the user runs) drives the switches while the lab starts none.

What is asserted is where packets go (the pinned flow's rule counts packets, pings
answer), not how fast: the tests share the host (``shares_host``)."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from testbed.fabric.bringup import bring_up, free_port
from testbed.host.capabilities import probe
from testbed.host.naming import new_run_id, run_prefix
from testbed.host.procs import Helper, wait_for
from topologies.build import build_topology

from .conftest import leftovers

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]
REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = {"planes": 1, "nodes": 4, "leaves_per_plane": 2, "spines_per_plane": 2}


def test_an_extra_app_pins_a_flow_to_one_spine(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the app's module is importable from the repository's top
    rid = new_run_id()
    spec = build_topology(TOPOLOGY, run_prefix(rid))
    with ExitStack() as stack:
        live = bring_up(spec, probe(rid), run_id=rid, out=tmp_path, stack=stack,
                        controller={"mode": "ecmp", "apps": ["examples.apps.pin_flow:PinFlow"]})
        leaf = spec.hosts[0].interface(0, 0).switch
        assert live.fabric.ping(spec.hosts[0].name, spec.hosts[3].interface(0, 0).ip,
                                count=3, wait_s=1)
        flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", leaf,
                                "cookie=0x9100000000000001/-1"], capture_output=True,
                               text=True).stdout
    uplink = spec.uplink_ports(leaf)[-1]
    assert f"actions=output:{uplink}" in flows and "n_packets=0," not in flows, flows
    assert leftovers(run_prefix(rid)) == []


def test_a_remote_controller_drives_the_switches(tmp_path):
    """The user's controller (here: the testbed's own apps, started by hand on a port of
    127.0.0.1) plans from the spec ``testbed spec`` exports for the scenario, installs the
    paths; the lab starts no controller and waits until every switch is connected to it."""
    port = free_port()
    mine = tmp_path / "mine"
    mine.mkdir()
    scenario = mine / "remote.yaml"
    scenario.write_text(json.dumps({"name": "remote", "topology": TOPOLOGY,
                                    "agents": {"enabled": False}}))
    exported = subprocess.run([sys.executable, "-m", "testbed.core.cli", "spec", str(scenario),
                               "-o", str(mine / "spec.json")], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr  # dpids, ports, IPs as the lab's
    (mine / "controller.json").write_text(json.dumps({"spec": str(mine / "spec.json"),
                                                      "mode": "ecmp"}))
    theirs = Helper("their-controller", [sys.executable, "-m", "controllers", "--config",
                                         str(mine / "controller.json"), "--port", str(port)],
                    pid_dir=tmp_path, log=mine / "controller.log")
    rid = new_run_id()
    spec = build_topology(TOPOLOGY, run_prefix(rid))
    try:
        with ExitStack() as stack:
            live = bring_up(spec, probe(rid), run_id=rid, out=tmp_path / "lab", stack=stack,
                            controller={"mode": "ecmp", "remote": f"127.0.0.1:{port}"})
            assert live.controller is None
            assert not (tmp_path / "lab" / "controller.log").exists()
            a, b = spec.hosts[0], spec.hosts[3]
            assert wait_for(lambda: live.fabric.ping(a.name, b.interface(0, 0).ip), 10,
                            interval=0.5)
    finally:
        theirs.stop()
    assert leftovers(run_prefix(rid)) == []
