"""Fabrics that are not a leaf-spine, on real switches: the k=4 fat-tree and the explicit
graph of ``examples/explicit-graph.yaml``.

Each comes up with its controller, every host pair pings on every plane, and traffic
between pods (through the core) is delivered under each routing mode (ECMP, adaptive:
flows placed at the edge and the aggregation switches, spray: the RoCE buckets carry
it) and across a cut link, repaired by fast failover with the controller dead, or by
recompute. Packets: 16 UDP flows of 10 datagrams (as in test_resilience), so the hash
spreads them over every path. Global first fit (``gff``) gets elephants of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from testbed.host.procs import wait_for

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
        from testbed.fabric.bringup import bring_up
        from testbed.host.capabilities import probe
        from testbed.host.naming import new_run_id, run_prefix

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
            script = " ".join(f"(ping -n -q -c 2 -i 0.2 -W 2 {ip} >/dev/null || echo FAIL {ip}) &"
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
    from testbed.faults.fabric import FabricFaults

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
    from testbed.faults.fabric import FabricFaults

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


def test_fat_tree_global_first_fit_gives_elephants_disjoint_paths(fat_tree, tmp_path):
    """Hedera's global first fit: four UDP elephants from pod 0 to pod 2 (one per host,
    each wanting a whole NIC) are placed on four paths that share no link, the switches'
    per-flow rules carry them there, and they arrive."""
    from controllers import adaptive

    live, stack = fat_tree
    spec = live.spec
    t = restart_controller(live, stack, mode="gff",
                           adaptive={"interval_ms": 500, "imbalance": 0.2,
                                     "elephant_mbps": 1.0})
    pairs = [(0, 8), (1, 10), (2, 9), (3, 11)]
    servers, clients = [], []
    for k, (_, dst) in enumerate(pairs):
        ip = spec.hosts[dst].interface(0, 0).ip
        servers.append(live.fabric.spawn(
            spec.hosts[dst].name, f"gffs{k}", ["iperf3", "-s", "-1", "-B", ip, "-p",
                                               str(25000 + k)], pid_dir=live.pid_dir))
        stack.callback(servers[-1].stop)
    time.sleep(0.5)
    for k, (src, dst) in enumerate(pairs):
        clients.append(live.fabric.spawn(
            spec.hosts[src].name, f"gffc{k}",
            ["iperf3", "-c", spec.hosts[dst].interface(0, 0).ip, "-B",
             spec.hosts[src].interface(0, 0).ip, "-p", str(25000 + k), "-u", "-b", "8M",
             "-t", "5", "-J"], pid_dir=live.pid_dir, stdout_file=tmp_path / f"c{k}.json"))
        stack.callback(clients[-1].stop)
    for c in clients:
        assert c.wait(20) == 0, (tmp_path / f"c{clients.index(c)}.json").read_text()[-400:]
    placed = [e for e in events(live, "flow_placed") if e["t"] >= t and e.get("path")]
    assert len(placed) == 4, placed
    links = [link for e in placed for link in e["path"]]
    assert len(links) == len(set(links)) == 16, links  # 4 links a path, none shared
    # the aggregation switches' per-flow rules carried the packets
    for e in placed:
        agg = e["path"][1].split(":")[0]
        assert rule_packets(agg, adaptive.PRIORITY_FLOW) > 0, agg
    for k in range(len(pairs)):
        end = json.loads((tmp_path / f"c{k}.json").read_text())["end"]
        got = end["sum_received"] if "sum_received" in end else end["sum"]
        assert got["lost_percent"] < 5, (pairs[k], got)
