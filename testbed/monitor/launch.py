"""Start a lab's monitor (:mod:`testbed.monitor.__main__`) as a helper of its run, and
learn where it listens; with it, on request, the lab's Prometheus and Grafana files
(:func:`watch`, for labs and runs alike), and what they all cost in CPU."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from testbed.core import layout
from testbed.errors import BringUpError, ConfigError
from testbed.host.procs import Helper, cpu_seconds, python_env, wait_for
from testbed.monitor import grafana, panels, prometheus

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
          port: int | str = "auto", field: str = "--monitor-port",
          kind: str = "fabric") -> Monitor:
    """The monitor of the lab whose spec and results are ``spec_file`` and ``out``,
    listening on 127.0.0.1:``port`` (``auto``: a free one). A port someone holds is
    the user's to change: ConfigError naming ``field``."""
    # in the run folder, with the helper's pid file: runtime state, and the monitor's
    # command line names the run (what testbed clean and the tests' leftovers look for)
    status = pid_dir / layout.MONITOR_STATUS
    status.unlink(missing_ok=True)
    helper = Helper("monitor", [sys.executable, "-m", "testbed.monitor", "--spec",
                                str(spec_file), "--out", str(out), "--status", str(status),
                                "--port", str(port), "--name", name, "--kind", kind],
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


@dataclass
class Watched:
    """A fabric watched live: its monitor, and its Prometheus where asked for."""

    monitor: Monitor
    prometheus: prometheus.Server | None
    grafana: Path | None
    since: float  # monotonic, when watching began

    def record(self) -> dict:
        return {"dashboard": self.monitor.url, "metrics": self.monitor.metrics,
                "prometheus": self.prometheus.url if self.prometheus else None,
                "grafana": str(self.grafana) if self.grafana else None}

    def cpu(self) -> dict:
        """CPU seconds each process took so far, and together as a share of one core
        over the time watched."""
        out = {"monitor_s": round(cpu_seconds(self.monitor.pid), 2)}
        if self.prometheus:
            out["prometheus_s"] = round(cpu_seconds(self.prometheus.pid), 2)
        elapsed = max(1e-6, time.monotonic() - self.since)
        out["core_share"] = round(sum(out.values()) / elapsed, 4)
        out["watched_s"] = round(elapsed, 1)
        return out


def watch(*, spec_file: Path, out: Path, pid_dir: Path, stack: ExitStack, name: str,
          port: int | str = "auto", with_prometheus: bool = False, keep_samples: bool = True,
          controller_metrics: str | None = None, field: str = "--monitor-port",
          kind: str = "fabric",
          progress: Callable[[str], None] = lambda line: None) -> Watched:
    """The monitor of a lab (its spec and results folder; ``kind`` fabric or backbone),
    and with ``with_prometheus`` a Prometheus scraping it (and the controller's own
    exporter, where it runs one) with Grafana provisioning for it in the results."""
    since = time.monotonic()
    mon = start(spec_file=spec_file, out=out, pid_dir=pid_dir, stack=stack, name=name,
                port=port, field=field, kind=kind)
    progress(f"{name}: dashboard at {mon.url}, metrics at {mon.metrics}")
    server = board = None
    if with_prometheus:
        targets = {"testbed": f"127.0.0.1:{mon.port}"}
        if controller_metrics:  # http://127.0.0.1:P/metrics
            targets["controller"] = controller_metrics.split("/")[2]
        server = prometheus.start(name=name, targets=targets, folder=pid_dir / "prometheus",
                                  out=out, pid_dir=pid_dir, stack=stack, keep=keep_samples)
        charts = {"backbone": panels.BACKBONE,
                  "storage": panels.FABRIC + panels.STORAGE}.get(kind, panels.FABRIC)
        board = grafana.write(out / layout.GRAFANA, server.url, name, charts, kind)
        progress(f"{name}: Prometheus at {server.url}, scraping every "
                 f"{prometheus.SCRAPE_S} s; Grafana provisioning for it in "
                 f"{board.parent.parent}")
    return Watched(mon, server, board.parent.parent if board else None, since)


def watch_run(ctx, live, *, out: Path, stack: ExitStack, tag: str,
              kind: str = "fabric") -> Watched | None:
    """A variant of a run watched as its scenario's ``monitor`` key asks (None: not)."""
    settings = ctx.watching
    if settings is None or not settings.wanted:
        return None
    counter, _, name = tag.rpartition(" ")  # "[1/3] ecmp": the lab's name is the variant's
    return watch(spec_file=out / layout.SPEC, out=out, pid_dir=live.pid_dir, stack=stack,
                 name=name, port=settings.port, with_prometheus=settings.prometheus,
                 keep_samples=settings.keep_samples, controller_metrics=live.metrics_url,
                 field="monitor.port", kind=kind,
                 progress=lambda line: ctx.progress(f"{counter} {line}".strip()))
