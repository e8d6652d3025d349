"""Acceptance on a running lab, real LLDP frames on every cable: a fabric as built is
accepted; two NICs swapped between rails are named by both ends (and accepted again
once swapped back); a cut cable is named and nothing else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import leftovers
from .test_lab import record_of, run_testbed

pytestmark = pytest.mark.ovs

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "lab-rails.yaml"


def accept(name: str, out: Path) -> tuple[int, str, dict]:
    done = run_testbed("accept", name)
    return done.returncode, done.stdout, json.loads((out / "acceptance.json").read_text())


def excluded(result: dict) -> list[str]:
    return [c["link"] for c in result["checks"][0]["cables"] if c["verdict"] == "excluded"]


def test_cabling_is_checked_with_lldp_on_every_cable(tmp_path):
    name = f"a{os.getpid() % 100000}"
    up = run_testbed("up", str(SCENARIO), "--name", name, "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    out = Path(record["out"])
    try:
        code, text, result = accept(name, out)
        assert code == 0, text
        assert result["accepted"] and excluded(result) == []
        assert len(result["checks"][0]["cables"]) == 12  # 8 NIC cables, 4 between switches

        assert run_testbed("fault", name, "swap_rails", "n1p0r0").returncode == 0
        code, text, result = accept(name, out)
        assert code == 1, text
        assert excluded(result) == ["n1-p0l0", "n1-p0l1"]
        assert result["checks"][0]["swapped"] == [["n1-p0l0", "n1-p0l1"]]
        assert "n1p0r0 hears p0l1e2, not p0l0e2" in text, text

        assert run_testbed("fault", name, "swap_rails", "n1p0r0").returncode == 0
        code, text, result = accept(name, out)
        assert code == 0 and excluded(result) == [], text

        assert run_testbed("fault", name, "link_down", "p0l0-p0s0").returncode == 0
        code, text, result = accept(name, out)
        assert code == 1 and excluded(result) == ["p0l0-p0s0"], text
        assert "hears nothing" in text
    finally:
        down = run_testbed("down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(f"tb{record['run_id']}") == []


def test_accept_of_no_lab_is_one_line_and_exit_2():
    done = run_testbed("accept", "no-such-lab")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
