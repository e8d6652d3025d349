"""A fabric in two parts on one machine: the runtime of a lab over several machines
(:mod:`testbed.cluster.runtime`) without the second machine. The second part runs as its
own process (the ``part`` a server runs over ssh, here started directly), its links to
the first are gretap tunnels over the loopback (127.0.0.1 to 127.0.0.2); the default
scenario's chains and training run across the cut. What this cannot show (ssh, a second
kernel and Open vSwitch, a real wire, VXLAN, the mirror of helpers' files: the parts
share one file system) is what ``make cluster-test`` runs on two lab VMs
(tests/cluster).

Both tunnel ends live in one machine's namespace here, which GRE allows (its tunnels
differ by their addresses) and VXLAN does not (one device per network id): a kernel
without GRE skips it, saying so (the development machine's; the lab VM has it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.cluster import remote, runtime
from testbed.cluster.servers import Connection, Server, check
from testbed.core import runner, scenario
from testbed.host.naming import new_run_id

from .conftest import leftovers

pytestmark = [pytest.mark.ovs, pytest.mark.vm]

REPO = Path(__file__).resolve().parents[2]
SECOND = Server(None, "127.0.0.2", None)


class SameMachine(Connection):
    """The second machine's connection, played by this one: its commands run here."""

    local = True

    def open(self, timeout_s: float = 20.0) -> None:
        return None

    def argv(self, remote, *, root: bool = True) -> list[str]:
        return list(remote)

    def forward(self, port: int) -> int:
        return port

    def python(self) -> list[str]:
        return [sys.executable]

    def close(self) -> None:
        return None


def connect_here(servers, spec, place, *, run_id, folder):
    """:func:`runtime.connect` with the second machine played by this one: its checks
    run as over ssh, and the tunnel kind is chosen from what they found."""
    conns = [SameMachine(s, folder / f"ssh-{m}") for m, s in enumerate(servers, start=1)]
    found = {str(c.server): check(c, run_id=run_id, peers=["127.0.0.1"]) for c in conns}
    return conns, runtime.choose_tunnel(spec, remote.check(run_id, ["127.0.0.2"]), found)


def test_the_default_scenario_runs_in_two_parts(tmp_path, monkeypatch):
    if "gretap" not in remote.check(new_run_id(), [])["tunnels"]:
        pytest.skip("the kernel makes no gretap (ip_gre): two tunnel ends in one namespace "
                    "need GRE (VXLAN allows one device per network id)")
    monkeypatch.setattr(runtime, "connect", connect_here)
    source = yaml.safe_load((REPO / "scenarios" / "agents-vs-training.yaml").read_text())
    source["variants"] = [v for v in source["variants"] if v["name"] == "training-1to1"]
    source.update(duration_s=15)  # the ring's first iterations take seconds under emulation
    sc = scenario.parse(source)
    summary = runner.run(sc, tmp_path / "out", servers=(SECOND,), progress=lambda _: None)
    run = summary["runs"][0]
    place = run["placement"]
    assert place["way"] == "group" and len(place["cut_links"]) == 4
    assert place["servers"] == ["here", "127.0.0.2"]
    assert place["tunnel"] == "gretap"
    # the chains' services on the second part answered the driver on the first
    assert run["agents"]["chains_started"] > 0 and run["agents"]["chains_failed"] == 0
    # the ring's ranks on both parts finished iterations (their files came back)
    assert run["training"]["iterations"] > 0
    # the second part's own monitor sampled its machine over the measured window, and
    # the lab judged those samples as its own
    server, = run["servers"]
    assert server["server"] == "127.0.0.2" and server["fidelity"]["samples"] >= 5
    assert server["cores"] >= 1 and 0 <= server["idle_share"] <= 1
    assert leftovers("tb" + run["run_id"]) == []
    parts = subprocess.run(["pgrep", "-f", "testbed.cluster.remote part"],
                           capture_output=True, text=True).stdout.split()
    assert parts == []
