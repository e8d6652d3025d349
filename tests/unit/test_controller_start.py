"""The controller starts from its one configuration file (no environment, no other flags)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from topologies.fattree import build_fattree

REPO = Path(__file__).resolve().parents[2]


def test_controller_starts_from_config_file_alone(tmp_path):
    spec = build_fattree(prefix="tb0c0c", k=4)
    spec.to_json(tmp_path / "spec.json")
    status = tmp_path / "events.jsonl"
    (tmp_path / "controller.json").write_text(json.dumps({
        "spec": str(tmp_path / "spec.json"), "status": str(status), "telemetry": None,
        "seed": 5, "mode": "adaptive", "fast_failover": True, "recompute": True}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTBED_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "controllers", "--config",
                             str(tmp_path / "controller.json"), "--port", str(port)],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        events: dict[str, dict] = {}
        while time.monotonic() < deadline and not {"started", "failover",
                                                   "congestion_started"} <= set(events):
            time.sleep(0.2)
            if status.exists():
                events = {e["event"]: e for e in map(json.loads, status.read_text().split("\n")
                                                     [:-1])}
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert events["started"]["switches"] == 20
        assert events["failover"]["fast_failover"] and events["failover"]["recompute"]
        assert events["congestion_started"]["mode"] == "adaptive"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def test_controller_refuses_a_missing_config(tmp_path):
    done = subprocess.run([sys.executable, "-m", "controllers", "--config",
                           str(tmp_path / "none.json"), "--port", "6653"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and "--config: no such file" in done.stderr
