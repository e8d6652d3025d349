"""Root test: the rate fault kind changes a real link's rate in place and back
(HTB class of every end), and delay is refused or applied as the kernel allows."""

from __future__ import annotations

import json

import pytest

from testbed.faults.fabric import FabricFaults
from testbed.host.procs import wait_for

from .conftest import small_fabric

pytestmark = pytest.mark.ovs


def iperf_mbps(live, src: int, dst: int, seconds: float = 3.0) -> float:
    """Goodput of one iperf3 TCP flow (one retry: a client can miss its fresh server)."""
    for _ in range(2):
        got = _iperf_once(live, src, dst, seconds)
        if got is not None:
            return got
    raise AssertionError("iperf3 measured nothing twice")


def _iperf_once(live, src: int, dst: int, seconds: float) -> float | None:
    spec, fabric = live.spec, live.fabric
    server = spec.hosts[dst].interface(0, 0).ip
    proc = fabric.spawn(spec.hosts[dst].name, "iperf-s", ["iperf3", "-s", "-1", "-B", server],
                        pid_dir=live.pid_dir)
    try:
        assert wait_for(lambda: fabric.run(spec.hosts[dst].name, [
            "ss", "-Hltn", "sport = :5201"]).stdout.strip() != "", 10)
        done = fabric.run(spec.hosts[src].name, ["iperf3", "-c", server, "-t", f"{seconds:g}",
                                                 "-J"], timeout=seconds + 15)
    finally:
        proc.stop()
    try:
        return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
    except (ValueError, KeyError):
        return None


def test_rate_fault_slows_the_link_and_restore_brings_it_back(tmp_path_factory):
    with small_fabric(tmp_path_factory, "rate", planes=1, link_mbps=40) as (live, stack):
        act = FabricFaults(live, stack).actions()
        before = iperf_mbps(live, 0, 3)
        act["rate"]("n0-p0l0", rate_mbps=8)
        slowed = iperf_mbps(live, 0, 3)
        act["rate_restore"]("n0-p0l0")
        after = iperf_mbps(live, 0, 3)
    # on a loaded 2-core host one TCP flow may reach only half of the 40 Mb/s; what
    # matters is that the 8 Mb/s fault bounds it and the restore lifts that bound
    assert before > 15, before
    assert slowed < 9, slowed  # the host link's new rate bounds the flow
    assert after > 15, after
