"""Root test: the fidelity monitor flags a run whose host was starved (two CPU hogs beside a
short fabric run with saturated uplinks) and passes the same run on a quiet host."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import fidelity, layout
from testbed.runner import run
from testbed.scenario import parse

pytestmark = pytest.mark.ovs

# One plane, 4 nodes on 2 leaves, 4:1 oversubscribed: the ring's two flows per leaf (6 Mb/s
# each) overrun its 10 Mb/s uplink, so the uplink queues stay backlogged (saturated).
SCENARIO = {
    "name": "fidelity-probe", "seed": 1, "duration_s": 6,
    "topology": {"planes": 1, "rails": 1, "nodes": 4, "leaves_per_plane": 2,
                 "spines_per_plane": 1, "link_mbps": 20, "mtu": 9000,
                 "oversubscription": 4, "queue_kb": 256},
    "agents": {"enabled": False},
    "training": {"enabled": True, "ranks": [0, 2, 1, 3], "bytes": 1_000_000,
                 "compute_ms": 0, "rate_mbps": 6, "payload": 4096},
}


def host_idle(seconds: float = 1.0) -> float:
    before = fidelity.parse_cpu_times(Path("/proc/stat").read_text())
    time.sleep(seconds)
    after = fidelity.parse_cpu_times(Path("/proc/stat").read_text())
    return (after.idle - before.idle) / max(1, after.total - before.total)


def run_probe(out: Path) -> tuple[dict, list[str]]:
    lines: list[str] = []
    summary = run(parse(dict(SCENARIO)), out, progress=lines.append)
    return summary, lines


def test_a_starved_host_is_flagged(tmp_path):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2)]
    try:
        summary, lines = run_probe(tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    entry, = summary["runs"]
    verdict = entry["fidelity"]
    assert not verdict["ok"], verdict
    assert any("idle CPU" in r for r in verdict["reasons"])
    assert verdict["stats"]["other_cores"]["mean"] > 1.0  # the hogs, not the lab
    assert verdict["stats"]["delivery"]["link_samples"] > 0  # the uplinks were watched
    samples = (tmp_path / entry["dir"] / layout.FIDELITY).read_text().splitlines()
    assert len(samples) >= verdict["samples"] >= 4
    assert any("warning: do not trust these numbers" in line for line in lines)
    report = (tmp_path / layout.REPORT).read_text()
    assert "**Do not trust the numbers of fidelity-probe:" in report
    assert "## Fidelity" in report
    manifest = json.loads((tmp_path / layout.MANIFEST).read_text())
    assert manifest["fidelity"]["ok"] is False
    assert manifest["fidelity"]["thresholds"] == fidelity.THRESHOLDS.to_dict()


def test_a_quiet_host_is_not_flagged(tmp_path):
    idle = host_idle()
    if idle < 0.6:
        pytest.skip(f"the host is busy with other work ({idle:.0%} idle): a quiet run "
                    "cannot be shown here")
    summary, _ = run_probe(tmp_path)
    verdict = summary["runs"][0]["fidelity"]
    assert verdict["ok"], verdict["reasons"]
    assert verdict["stats"]["delivery"]["link_samples"] > 0
    assert verdict["stats"]["delivery"]["p10"] > fidelity.THRESHOLDS.delivery_min
