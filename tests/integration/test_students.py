"""A student's own copy of lab 9 (``testbed start 9 --student ID``), run for real and
graded with the id: the run used the id's seed and objects, the cache sized for those
objects passes, and the same run handed in for another id fails.

What is asserted does not depend on the host's load: ``student-variant`` compares the
run's records (summary.json's seeds, manifest.json's objects) with the id's values, and
``cache-sized-from-popularity`` is arithmetic on the objects the run stored. A run the
fidelity monitor flags grades RERUN (exit 3) for its own id, and still FAIL (exit 1) for
another id's: running it again would not make it that student's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.experiments.storage.schema import validate
from testbed.reports import grading, students

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "testbed.core.cli"]
RERUN = 3


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, students.SECRET_ENV: ""})


def test_lab9_student_copy_run_and_graded_per_id(tmp_path):
    lab = grading.find("9")
    check = students._module(lab)
    sid = "eve"  # zipf 0.95, sizes 64, 16, 256, 64 KB: the smallest cache is 4 MB
    mine = students.derive(lab, sid, b"").params
    objects = validate({"objects": {k: mine[k] for k in ("keys", "zipf", "sizes_kb")}}).objects
    need = check.smallest_cache_mb(objects, check.TARGET_SHARE)
    assert need == 4

    made = cli("start", "9", "--student", sid, "--out", str(tmp_path / "my-labs"))
    assert made.returncode == 0, made.stderr
    copy = tmp_path / "my-labs" / f"lab09-{sid}" / "scenario.yaml"
    text = copy.read_text()
    assert re.search(r"^  cache_mb: 1$", text, re.M)
    text = re.sub(r"^  cache_mb: 1$", f"  cache_mb: {need}", text, flags=re.M)
    # the graded checks below read the student's seed, objects and cache_mb only: the
    # read steps of 4 nodes and 2 s add nothing to them
    assert re.search(r"^  readers: \[1, 2, 4\]\n  read_seconds: 2$", text, re.M)
    copy.write_text(re.sub(r"^  readers: .*\n  read_seconds: 2$",
                           "  readers: [1, 2]\n  read_seconds: 1", text, flags=re.M))

    out = tmp_path / "results"
    ran = cli("run", str(copy), "--out", str(out), "--duration", "3", timeout=1500)
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == mine["seed"] and summary["seeds"] == [mine["seed"]]
    source = json.loads((out / "manifest.json").read_text())["scenario_source"]
    assert source["storage"]["objects"] == {k: mine[k] for k in ("keys", "sizes_kb", "zipf")}

    graded = cli("check", "9", str(out), "--student", sid)
    assert graded.returncode in (0, 1, RERUN), graded.stderr
    lines = [ln.removeprefix("  (not graded) ") for ln in graded.stdout.splitlines()]
    assert any(ln.startswith(f"PASS student-variant: student {sid}: seed {mine['seed']}")
               for ln in lines), graded.stdout
    assert any(ln.startswith(f"PASS cache-sized-from-popularity: cache_mb {need} holds")
               and f"{need} MB is the smallest" in ln for ln in lines), graded.stdout

    other = cli("check", "9", str(out), "--student", "bob")
    assert other.returncode == 1, other.stdout
    assert other.stdout.startswith("FAIL student-variant: not student bob's values: the "
                                   f"folder has seed {mine['seed']}"), other.stdout
    assert "RERUN" not in other.stdout
