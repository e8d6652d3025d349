"""A small backbone with real FRR (OSPF + BFD, fast timers): a link cut reroutes by itself.

The test only cuts and restores the link; the daemons find the other path. Then
nothing with the run's prefix may be left: namespaces, interfaces, FRR processes,
sockets and files under /run/testbed/<id>.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.backbone.experiment import run
from testbed.naming import new_run_id, run_prefix
from topologies.backbone import small_backbone

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not Path("/usr/lib/frr/ospfd").exists()
                                 or shutil.which("iperf3") is None,
                                 reason="needs FRR (apt-get install frr) and iperf3")]


def _leftovers(run_id: str) -> list[str]:
    prefix = run_prefix(run_id)
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [n.split()[0] for n in netns.splitlines() if n.startswith(prefix)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [ln.split(":")[1].strip() for ln in links.splitlines() if prefix in ln]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found += [p for p in procs.splitlines() if f"/run/testbed/{run_id}/" in p or prefix in p]
    if Path(f"/run/testbed/{run_id}").exists():
        found.append(f"/run/testbed/{run_id}")
    return found


def test_link_cut_reroutes_without_intervention(tmp_path):
    run_id = new_run_id()
    # a ring of four PoPs, two links per span; p1-p2-1 is the unique best ra -> rb link
    bb = small_backbone()
    links = [{"name": lk.name, "a": lk.a, "b": lk.b, "capacity_mbps": 100,
              "length_km": {"p1-p2-1": 200, "p1-p2-2": 1000}.get(lk.name, 2000)}
             for lk in bb.links]
    section = {
        "topology": "inline", "pops": [{"name": p.name} for p in bb.pops],
        "regions": [{"name": "ra", "pops": ["p1", "p4"]}, {"name": "rb", "pops": ["p2", "p3"]}],
        "links": links, "settle_s": 1, "probe_rate_pps": 200,
        "timers": {"fast": {"bfd_ms": 100, "bfd_multiplier": 3, "hello_s": 1, "dead_s": 3}},
        "replication": [{"src": "ra", "dst": "rb", "rate_mbps": 10}],
        "faults": [{"at_s": 3, "action": "cut_link", "target": "p1-p2-1"},
                   {"at_s": 7, "action": "restore_link", "target": "p1-p2-1"}],
    }
    try:
        result = run(section, out=tmp_path, duration_s=11, seed=1, run_id=run_id,
                     progress=lambda line: None)
    finally:
        assert _leftovers(run_id) == []
    entry = result["runs"][0]
    cut, = entry["failovers"]
    restore, = entry["restores"]
    assert cut["fault"] == "cut_link p1-p2-1"
    # the routing tables changed by themselves: before over the cut link, after around it
    assert cut["detect_ms"] is not None and cut["detect_ms"] < 1000
    for pair in ("ra>rb", "rb>ra"):
        assert "p1-p2-1" in cut["path_before"][pair]["links"]
        assert "p1-p2-1" not in cut["path_after"][pair]["links"]
        assert "unreachable" not in cut["path_after"][pair]["nodes"]
        assert "p1-p2-1" in restore["path_after"][pair]["links"]  # back on the best link
    assert cut["reachability_after"] == 1.0
    assert cut["restore_ms"] is not None and cut["restore_ms"] < 1000
    assert cut["lost_packets"] <= 200  # at most one second of probes on both pairs
    assert restore["reachability_after"] == 1.0
    assert entry["replication"][0]["bytes"] > 0
    assert (tmp_path / "probe_loss.png").stat().st_size > 0
    assert result["backbone"]["design_check"]["ok"]
