"""The measuring scripts behind the docs' figures: scripts/sizing.py (what a run needs
of the host) and scripts/lesson_figures.py (a lesson's key figure from a real run)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sizing_measures_a_command_and_passes_its_exit_status_on(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "x.bin").write_bytes(b"\0" * 2_000_000)
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "sizing.py"), "--out",
                           str(out), "--json", str(tmp_path / "s.json"), "--", sys.executable,
                           "-c", "import time, sys; time.sleep(1.2); sys.exit(3)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    figures = json.loads((tmp_path / "s.json").read_text())
    assert figures["exit_status"] == 3 and figures["wall_s"] >= 1.2
    assert figures["results_mb"] == 2.0 and figures["cpus"] >= 1
    assert 0 <= figures["busy_cores_mean"] <= figures["cpus"]
    assert "sizing:" in done.stderr


def test_a_flagged_run_gives_no_figure(tmp_path, monkeypatch):
    figures = load("lesson_figures")
    monkeypatch.setattr(figures, "OUT", tmp_path / "img")
    folder = tmp_path / "lossless"
    folder.mkdir()
    runs = [{"name": "pfc", "fidelity": {"ok": False}}, {"name": "fifo"}]
    (folder / "summary.json").write_text(json.dumps({"runs": runs}))
    why = figures.figure("lossless", tmp_path, run=False)
    assert why.startswith("flagged by the fidelity monitor: pfc")
    runs[0]["fidelity"]["ok"] = True
    (folder / "summary.json").write_text(json.dumps({"runs": runs}))
    assert figures.figure("lossless", tmp_path, run=False) == \
        "the run wrote no variants/pfc/qos.png"
    assert not (tmp_path / "img").exists()  # nothing copied either time
