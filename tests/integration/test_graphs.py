"""Fabrics that are not a leaf-spine, on real switches: the k=4 fat-tree and the explicit
graph of ``examples/explicit-graph.yaml``.

Each comes up with its controller, every host pair pings on every plane, and traffic
between pods (through the core) is delivered under each routing mode (ECMP, adaptive:
flows placed at the edge and the aggregation switches, spray: the RoCE buckets carry
it) and across a cut link, repaired by fast failover with the controller dead, or by
recompute. Packets: 16 UDP flows of 10 datagrams (as in test_resilience), so the hash
spreads them over every path.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from testbed.procs import wait_for

from .conftest import leftovers
from .test_resilience import all_flows_through, events, flows_delivered, restart_controller

pytestmark = pytest.mark.ovs

REPO = Path(__file__).resolve().parents[2]
ROCE = 4791


@pytest.fixture(scope="module")
def fat_tree(tmp_path_factory) -> Iterator[tuple]:
    """A k=4 fat-tree at 50 Mb/s, one plane, ECMP: (live fabric, its ExitStack)."""
    from topologies.fattree import build_fattree

    with graph_fabric(tmp_path_factory, "fattree",
                      lambda prefix: build_fattree(prefix=prefix, k=4, link_mbps=50)) as up:
        yield up


@pytest.fixture(scope="module")
def explicit(tmp_path_factory) -> Iterator[tuple]:
    """The explicit example's graph: (live fabric, its ExitStack)."""
    from topologies.build import build_topology

    section = yaml.safe_load((REPO / "examples" / "explicit-graph.yaml").read_text())
    with graph_fabric(tmp_path_factory, "explicit",
                      lambda prefix: build_topology(section["topology"], prefix)) as up:
        yield up


class graph_fabric:  # noqa: N801 (a context manager, named like one)
    """Bring up the spec ``make(prefix)`` with an ECMP controller; check for leftovers."""

    def __init__(self, factory, name: str, make) -> None:
        self.factory, self.name, self.make = factory, name, make

    def __enter__(self) -> tuple:
        from testbed.bringup import bring_up
        from testbed.capabilities import probe
        from testbed.naming import new_run_id, run_prefix

        run_id = new_run_id()
        self.prefix = run_prefix(run_id)
        self.stack = ExitStack()
        out = self.factory.mktemp(self.name)
        live = bring_up(self.make(self.prefix), probe(run_id), run_id=run_id,
                        controller={"mode": "ecmp"}, out=out, stack=self.stack)
        return live, self.stack

    def __exit__(self, *exc) -> None:
        self.stack.close()
        assert leftovers(self.prefix) == []


def every_pair_pings(live) -> list[str]:
    """Each host pings every other host on every plane at once; returns the failures."""
    failed = []
    spec = live.spec
    for plane in range(spec.planes):
        for a in spec.hosts:
            ips = [b.interface(plane, 0).ip for b in spec.hosts if b is not a]
            script = " ".join(f"(ping -n -q -c 2 -W 2 {ip} >/dev/null || echo FAIL {ip}) &"
                              for ip in ips) + " wait"
            done = live.fabric.run(a.name, ["sh", "-c", script], timeout=30)
            failed += [f"{a.name} -> {line.split()[1]} (plane {plane})"
                       for line in done.stdout.splitlines() if line.startswith("FAIL")]
    return failed


def rule_packets(switch: str, priority: int) -> int:
    out = subprocess.run(["timeout", "10", "ovs-ofctl", "-O", "OpenFlow13", "dump-flows",
                          switch], capture_output=True, text=True).stdout
    return sum(int(n) for line in out.splitlines() if f"priority={priority}," in line
               for n in re.findall(r"n_packets=(\d+)", line))


# -- fat-tree --------------------------------------------------------------------------------
def test_fat_tree_every_pair_pings(fat_tree):
    live, _ = fat_tree
    assert len(live.spec.switches) == 20 and len(live.spec.hosts) == 16
    assert every_pair_pings(live) == []


def test_fat_tree_ecmp_adaptive_spray_deliver_between_pods(fat_tree):
    from controllers import spray

    live, stack = fat_tree
    p = live.spec.prefix
    restart_controller(live, stack, mode="ecmp")
    assert all_flows_through(got := flows_delivered(live, 0, 15)), got

    t = restart_controller(live, stack, mode="adaptive")
    assert all_flows_through(got := flows_delivered(live, 0, 15)), got
    placed = {e["switch"][len(p):] for e in events(live, "flow_placed") if e["t"] >= t}
    assert "p0e0" in placed and placed & {"p0a0", "p0a1"}, placed  # edge and aggregation

    restart_controller(live, stack, mode="spray")
    before = rule_packets(p + "p0e0", spray.PRIORITY_SPRAY)
    assert all_flows_through(got := flows_delivered(live, 0, 15, port=ROCE)), got
    assert rule_packets(p + "p0e0", spray.PRIORITY_SPRAY) - before >= 16 * 10


# recompute first: the fast-failover rules stay on the switches after their controller
# (a restarted controller only adds), and would repair the next control case too
@pytest.mark.parametrize("repair", ["recompute", "fast_failover"])
def test_fat_tree_cut_link_is_repaired(fat_tree, repair):
    """An aggregation-core link of the destination's pod is cut: flows from pod 0 to pod
    3 that hash over it are lost without repair (checked first), and all arrive with
    fast failover (controller dead: the switches alone) or with recompute."""
    from testbed.fabric_faults import FabricFaults

    live, stack = fat_tree
    act = FabricFaults(live, stack).actions()
    cut = "p0a6-p0c0"  # pod 3's first aggregation switch to the first core

    def cut_and_send(**options) -> dict[int, int]:
        restart_controller(live, stack, **options)
        if options.get("fast_failover"):
            act["controller_kill"]("controller")
        act["link_down"](cut)
        try:
            if options.get("recompute"):
                assert wait_for(lambda: [e for e in events(live, "recomputed") if e["down"]],
                                10)
            return flows_delivered(live, 0, 15)
        finally:
            act["link_up"](cut)
            if not live.controller.alive():
                restart_controller(live, stack)

    control = cut_and_send()
    assert not all_flows_through(control), "the cut did not hurt: this test proves nothing"
    got = cut_and_send(**{repair: True})
    assert all_flows_through(got), got


# -- explicit graph --------------------------------------------------------------------------
def test_explicit_graph_pings_and_survives_its_cut(explicit):
    """The example's graph: every pair pings; the cut the example schedules (l1-s1) is
    repaired by fast failover with the controller dead."""
    from testbed.fabric_faults import FabricFaults

    live, stack = explicit
    assert every_pair_pings(live) == []
    act = FabricFaults(live, stack).actions()
    restart_controller(live, stack, fast_failover=True)
    act["controller_kill"]("controller")
    act["link_down"]("l1-s1")
    try:
        got = flows_delivered(live, 2, 0)  # h3 (l2) -> h1 (l1): half the flows via s1
        back = flows_delivered(live, 0, 2)
    finally:
        act["link_up"]("l1-s1")
        restart_controller(live, stack)
    assert all_flows_through(got), got
    assert all_flows_through(back), back
