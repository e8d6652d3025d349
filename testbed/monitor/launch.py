"""Start a lab's monitor (:mod:`testbed.monitor.__main__`) as a helper of its run, and
learn where it listens."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from testbed.core import layout
from testbed.errors import BringUpError, ConfigError
from testbed.host.procs import Helper, python_env, wait_for

START_TIMEOUT_S = 30  # the import alone takes seconds in the emulated lab VM


@dataclass(frozen=True)
class Monitor:
    url: str
    port: int
    pid: int

    @property
    def metrics(self) -> str:
        return f"{self.url}metrics"

    def record(self) -> dict:
        return {"url": self.url, "metrics": self.metrics, "port": self.port, "pid": self.pid}


def _events(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def start(*, spec_file: Path, out: Path, pid_dir: Path, stack: ExitStack, name: str,
          port: int | str = "auto", field: str = "--monitor-port") -> Monitor:
    """The monitor of the lab whose spec and results are ``spec_file`` and ``out``,
    listening on 127.0.0.1:``port`` (``auto``: a free one). A port someone holds is
    the user's to change: ConfigError naming ``field``."""
    status = out / layout.MONITOR_STATUS
    status.unlink(missing_ok=True)
    helper = Helper("monitor", [sys.executable, "-m", "testbed.monitor", "--spec",
                                str(spec_file), "--out", str(out), "--status", str(status),
                                "--port", str(port), "--name", name],
                    pid_dir=pid_dir, log=out / layout.MONITOR_LOG, env=python_env())
    stack.callback(helper.stop)
    if not wait_for(lambda: _events(status) or not helper.alive(), START_TIMEOUT_S):
        raise BringUpError(f"the lab monitor did not start in {START_TIMEOUT_S} s "
                           f"(see {out / layout.MONITOR_LOG})")
    events = _events(status)
    if not events:
        raise BringUpError(f"the lab monitor failed (see {out / layout.MONITOR_LOG})")
    last = events[-1]
    if last["event"] == "failed":
        raise ConfigError(field, f"127.0.0.1:{last['port']}: {last['error']} (another "
                                 "lab's?); give another port, or auto")
    return Monitor(url=last["url"], port=last["port"], pid=helper.pid)
