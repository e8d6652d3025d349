"""``testbed check 1 --rerun``: a student's lab 1 submission (the starter scenario, its
paced variant not paced) run again for real on this host with the grader's seed, then
graded. Asserted whatever the host's load: the run used the grader's seed and duration,
its folder carries a digest that verifies, the class table has its row, the paced
variant's check fails with the configured rate (it reads the run's configuration, not
a measurement), and a second call reads the grade back without running again. The
grade itself is FAIL on a quiet host and RERUN when the fidelity monitor flagged it, so
the test shares the host (``shares_host``)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.core import digest

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]

REPO = Path(__file__).resolve().parents[2]
SEED = 777
FAIL, RERUN = 1, 3


def check(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.core.cli", "check", *argv],
                          cwd=REPO, capture_output=True, text=True, timeout=900)


def test_a_submission_is_run_again_with_the_graders_seed_and_graded(tmp_path):
    sub = tmp_path / "hand-ins" / "ann"
    sub.mkdir(parents=True)
    shutil.copy(REPO / "labs" / "lab01_oversubscription" / "starter" / "scenario.yaml", sub)
    queue, table = tmp_path / "queue", tmp_path / "class.csv"
    argv = ["1", "--rerun", str(sub), "--seed", str(SEED), "--duration", "3",
            "--out", str(queue), "--csv", str(table)]

    done = check(*argv)
    assert done.returncode in (FAIL, RERUN), (done.stdout, done.stderr)
    assert "[1/1] ann: running" in done.stdout, done.stdout
    results = queue / "ann"
    summary = json.loads((results / "summary.json").read_text())
    assert summary["seed"] == SEED and summary["seeds"] == [SEED]
    assert summary["duration_s"] == 3
    assert [r["name"] for r in summary["runs"]] == [
        "agents-only", "agents-only-4to1", "training-1to1", "training-4to1",
        "training-4to1-paced"]
    assert "summary.json" in digest.verify(results)
    rows = list(csv.DictReader(table.open()))
    assert [r["folder"] for r in rows[:1]] == [str(sub)], rows
    verdict = {FAIL: "FAIL", RERUN: "RERUN"}[done.returncode]
    assert rows[0]["verdict"] == verdict
    assert rows[0]["paced-slower"] == "FAIL"  # 12 Mb/s, as unpaced: the starter's TODO
    assert f"[1/1] ann: {verdict} (" in done.stdout

    again = check(*argv)  # the same call: read back, not run again
    assert again.returncode == done.returncode, again.stderr
    assert "done before, read back" in again.stdout and "ann: running" not in again.stdout
