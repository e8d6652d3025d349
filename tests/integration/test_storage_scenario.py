"""The storage kind end to end through the CLI, shrunk to a few seconds of traffic.

Two GPU nodes, 20 objects, chains for 3 s and reads of 1 and 2 nodes for 1 s each, both
variants: the summary holds what the issue asks for (read and chain percentiles, hit
ratio, bytes per source, throughput per reader count, the 8x scaled), the store's own
count of bytes sent equals what the caches fetched, and nothing of either run is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.host.naming import run_prefix
from testbed.host.procs import python_env

from .conftest import leftovers

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]
REPO = Path(__file__).resolve().parents[2]


def test_storage_cache_scenario_runs_end_to_end(tmp_path):
    data = yaml.safe_load((REPO / "scenarios" / "storage-cache.yaml").read_text())
    data["storage"].update(gpu_nodes=2, gpu_leaves=1, readers=[1, 2], read_seconds=1,
                           objects={"keys": 20, "sizes_kb": [64], "zipf": 1.0})
    scenario, out = tmp_path / "s.yaml", tmp_path / "out"
    scenario.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run", str(scenario),
                           "--duration", "3", "--out", str(out)], capture_output=True,
                          text=True, timeout=300, env=python_env())
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    assert set(runs) == {"uncached", "cached"}
    for run in runs.values():
        assert run["agents"]["chains_completed"] > 0 and run["agents"]["chains_failed"] == 0
        assert run["reads"]["reads"] > 0 and run["reads"]["errors"] == 0
        assert [t["readers"] for t in run["throughput"]] == [1, 2]
        assert all(t["mbps"] > 0 and t["errors"] == 0 for t in run["throughput"])
        assert leftovers(run_prefix(run["run_id"])) == []
    cached = runs["cached"]
    assert cached["reads"]["hit_ratio"] > 0 and cached["caches"]["hits"] > 0
    assert cached["caches"]["bytes_from_store"] == cached["bytes_sent_by_store"]
    # the caches' count of the retriever's reads is the retriever's own, hits alike
    assert cached["caches"]["chains"]["reads"] == cached["reads"]["reads"]
    assert cached["caches"]["chains"]["hit_ratio"] == cached["reads"]["hit_ratio"]
    assert cached["caches"]["throughput"]["reads"] == sum(
        t["reads"] for t in cached["throughput"])
    assert runs["uncached"]["caches"]["reads"] == 0
    assert summary["storage"]["hit_speedup"] > 1
    assert "## Storage" in (out / "report.md").read_text()
