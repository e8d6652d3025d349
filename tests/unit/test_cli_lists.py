"""The commands that list what the lab offers and touch no host: ``testbed scenarios``,
``testbed spec`` and ``testbed fault --list``; a wrong name is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.faults.kinds import KINDS

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.core.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_scenarios_lists_every_shipped_scenario_with_its_variants():
    done = run_cli("scenarios", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert set(rows) == {p.stem for p in (REPO / "scenarios").glob("*.yaml")}
    assert rows["agents-vs-training"]["variants"] == "agents-only, training-1to1, training-4to1"
    assert rows["backbone-failover"]["kind"] == "backbone"
    assert all(r["description"] for r in rows.values())
    text = run_cli("scenarios").stdout
    assert "lossless (fabric): fifo, classes, pfc, pfc-dcqcn" in text


def test_spec_is_the_fabric_a_remote_controller_gets(tmp_path):
    out = tmp_path / "ft.json"
    done = run_cli("spec", "fat-tree", "--variant", "adaptive-stride", "-o", str(out))
    assert done.returncode == 0, done.stderr
    spec = json.loads(out.read_text())
    assert spec["builder"] == "fat-tree" and len(spec["switches"]) == 20
    assert len({s["dpid"] for s in spec["switches"]}) == 20
    assert all({"a_port", "b_port"} <= set(lk) for lk in spec["links"])
    printed = json.loads(run_cli("spec", "agents-vs-training").stdout)
    assert printed["nodes"] == 8


@pytest.mark.parametrize("args", [("spec", "nope"), ("spec", "fat-tree", "--variant", "x"),
                                  ("spec", "backbone-failover"), ("fault",),
                                  ("fault", "nolab")])
def test_wrong_names_are_one_line_and_exit_2(args):
    done = run_cli(*args)
    assert done.returncode == 2, (args, done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_fault_list_names_every_kind_with_its_target_and_parameters():
    done = run_cli("fault", "--list")
    assert done.returncode == 0, done.stderr
    for name in KINDS:
        assert f"  {name} " in done.stdout
    assert "link_flap           LINK (p0l0-p0s1, n0-p0l0) --period PERIOD_S --count COUNT" \
        in done.stdout
    assert "degrade_link            LINK (nyc-lon-1, ...) --loss FRACTION" in done.stdout
