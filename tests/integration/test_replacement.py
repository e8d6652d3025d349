"""Replacement during a run, real frames through real switches: a service node whose
cable starts losing a fifth of its frames is declared degraded by the health loop (no
other node is), its service and training rank move to the first spare while the chains
go on, and no chain that started after the declaration fails; the training job starts
again on the spare from the iteration after its last; nothing is left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import leftovers

pytestmark = pytest.mark.ovs

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "node-replacement.yaml"
FAULT_AT_S = 4.0


def test_a_degraded_node_is_declared_and_its_service_moves_to_a_spare(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run", str(SCENARIO),
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run, = json.loads((out / "summary.json").read_text())["runs"]
    rep = run["replacement"]
    assert rep["watched"] == ["n0", "n1", "n2", "n3"] and rep["error"] is None
    event, = rep["events"]  # the degraded node, and no other
    assert event["node"] == "n1" and event["roles"] == ["retriever", "rank0"]
    # declared after the fault, within two windows, their grace and a window's slack
    assert FAULT_AT_S - 0.5 <= event["declared_s"] <= FAULT_AT_S + 4.0, event
    assert event["moved"] == {"retriever": "n4", "rank0": "n4"} and event["to"] == "n4"
    assert 0 < event["replace_ms"] < 5000
    assert event["replace_ms"] < event["training_restart_ms"] < 15000
    first = event["training_from_iteration"]
    assert first > 0  # from a checkpoint: the job's iterations numbered on
    assert run["training"]["iterations"] > first  # and it ran on after the restart
    assert event["chains_after"] > 0 and event["chains_failed_after"] == 0, event
    variant = out / "variants" / "node-replacement"
    windows = json.loads((variant / "replacement.json")
                         .read_text())["windows"]
    assert len(windows) >= 8  # a window a second over the run
    assert event["nic"] == "n1:n1p0r0" and set(windows[0]) == {
        "t_s", "n0:n0p0r0", "n1:n1p0r0", "n2:n2p0r0", "n3:n3p0r0"}
    hops = [json.loads(line) for line in (variant / "hops.jsonl").read_text().splitlines()]
    retrieves = [h for h in hops if h["service"] == "retriever"]
    later = [h for h in retrieves if h["start"] > event["released_at"] + 0.1]
    directory = json.loads((variant / "services.json")
                           .read_text())
    assert directory["held"] == []
    (ip, port), = directory["services"]["retriever"]  # the spare's, as the driver was told
    assert later and {h["address"] for h in later} == {f"{ip}:{port}"}
    before = [h for h in retrieves if h["start"] < event["declared_at"] - 1.0]
    assert before and {h["address"] for h in before} != {h["address"] for h in later}
    assert all(h["ok"] for h in later)
    for rank in (0, 1):  # each rank's file: the iterations before, then after the restart
        its = [json.loads(line)["iteration"] for line in
               (variant / f"training-rank{rank}.jsonl").read_text().splitlines()]
        assert its == sorted(its) and len(set(its)) == len(its), its
        assert min(its) < first <= max(its), (first, its)
    report = (out / "report.md").read_text()
    assert "## Node health and replacement" in report and "moved to n4" in report
    assert leftovers(f"tb{run['run_id']}") == []
