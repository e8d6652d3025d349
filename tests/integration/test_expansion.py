"""A rack cabled into a running fabric lab (``testbed expand``), real frames through real
switches: the lab trains across both planes while a leaf a plane and two nodes are added;
the rack is accepted on its own, then routed; nothing sent across the old fabric
meanwhile is lost; the new nodes reach the old ones; bad input changes nothing; the lab
goes down leaving nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import leftovers
from .test_lab import record_of, run_testbed

pytestmark = pytest.mark.ovs

REPO = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "expansion.yaml"


def test_a_rack_is_accepted_then_routed_and_the_old_fabric_loses_nothing(tmp_path):
    name = f"x{os.getpid() % 100000}"
    up = run_testbed("up", str(SCENARIO), "--name", name, "--traffic", "--results",
                     str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    out = Path(record["out"])
    try:
        # bad input: one line naming the field, exit 2, the fabric as it was
        bad = run_testbed("expand", name, "--leaves", "1", "--nodes", "3")
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.strip().splitlines() == [
            "testbed: error: --nodes: must be 2 (1 leaf of 2 nodes each, as the fabric's "
            "leaves have), got 3"], bad.stderr
        assert record_of(name)["size"] == record["size"]

        done = run_testbed("expand", name, "--leaves", "1", "--nodes", "2", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        grown = json.loads((out / "expansion.json").read_text())
        assert grown["added"] == {"switches": ["p0l2", "p1l2"], "nodes": ["n4", "n5"],
                                  "links": 8}  # a NIC a node a plane, an uplink a spine
        assert grown["acceptance"]["accepted"], grown["acceptance"]
        rack = json.loads((out / "acceptance-rack.json").read_text())
        cables = rack["checks"][0]["cables"]
        assert sorted(c["link"] for c in cables) == sorted(
            ["n4-p0l2", "n5-p0l2", "n4-p1l2", "n5-p1l2", "p0l2-p0s0", "p0l2-p0s1",
             "p1l2-p1s0", "p1l2-p1s1"])
        probed = {(p["from"], p["to"]) for p in rack["checks"][2]["paths"]}
        assert probed and all("l2" in a + b for a, b in probed)  # the rack's pairs only
        assert rack["checks"][3]["runs"][0]["nodes"] == ["n4", "n5"]

        old = grown["old_fabric"]
        assert old["sent"] > 1000 and old["lost"] == 0, old
        assert len(old["pairs"]) == 4  # two pairs a plane, through the spines
        assert grown["routed"]["traffic_after_s"] is not None

        after = record_of(name)
        assert after["size"] == {"switches": 10, "hosts": 6, "links": 24}
        # two echoes 0.2 s apart: the second second of ping's default interval proves nothing
        ping = run_testbed("exec", name, "n5", "--", "ping", "-c2", "-i0.2", "-W2", "10.1.0.1")
        assert ping.returncode == 0, ping.stdout + ping.stderr

        # a second rack arrives with a port losing 2 %: its acceptance names that cable
        # (and its node) and nothing else; the rest of the rack is routed
        bad = run_testbed("expand", name, "--leaves", "1", "--nodes", "2", "--plant",
                          "degrade:n4-p0l2")
        assert bad.returncode == 2 and "--plant" in bad.stderr, bad.stderr  # not the rack's
        done = run_testbed("expand", name, "--leaves", "1", "--nodes", "2", "--plant",
                           "degrade:n7-p1l3", timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        second = json.loads((out / "expansion.json").read_text())
        assert second["added"]["nodes"] == ["n6", "n7"]
        assert second["score"] == {"found": ["n7", "n7-p1l3"], "missed": [], "extra": []}
        assert second["old_fabric"]["lost"] == 0, second["old_fabric"]
        ping = run_testbed("exec", name, "n6", "--", "ping", "-c2", "-i0.2", "-W2", "10.1.0.5")
        assert ping.returncode == 0, ping.stdout + ping.stderr  # the new rack to the first
    finally:
        down = run_testbed("down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(f"tb{record['run_id']}") == []


def test_add_rack_in_a_run_records_the_rack_and_its_acceptance(tmp_path):
    """The fault kind of a scenario: the rack is added while training runs, its planted
    lossy port is named, the run records and reports the expansion, nothing is left."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run",
                           str(SCENARIO.parent / "add-rack.yaml"), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run, = json.loads((out / "summary.json").read_text())["runs"]
    grown = run["seeds"][0]["expansion"] if run.get("seeds") else run["expansion"]
    assert grown["added"]["nodes"] == ["n4", "n5"]
    assert grown["score"] == {"found": ["n5", "n5-p0l2"], "missed": [], "extra": []}
    assert grown["old_fabric"]["sent"] > 0 and grown["old_fabric"]["lost"] == 0
    assert run["training"]["iterations"] > 0 and run["training"]["packets_lost"] == 0
    report = (out / "report.md").read_text()
    assert "## Racks added during the run" in report and "degrade n5-p0l2" in report
    assert leftovers(f"tb{run['run_id']}") == []
