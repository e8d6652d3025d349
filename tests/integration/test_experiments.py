"""Root test: a plug-in experiment kind (examples/kinds/pingmesh.py) runs through
``testbed run`` like the built-in kinds, and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import leftovers

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]


def test_plugin_kind_runs_end_to_end(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run",
                           "examples/pingmesh.yaml", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "examples.kinds.pingmesh"
    run, = summary["runs"]
    assert run["pairs"] == 6 and run["answered"] == 6
    assert run["dir"] == "variants/mesh"
    assert (out / "variants" / "mesh" / "rtts.json").exists()
    assert "## Ping mesh" in (out / "report.md").read_text()
    assert leftovers(f"tb{run['run_id']}") == []
