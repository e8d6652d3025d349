"""One launcher of agent chains for every experiment kind: services, then the driver.

A chain visits the four services (retriever, tool, model, agent) in turn; each service
is a ``traffic agent-service`` process listening on one address per path (a fabric host
on every plane, a MACsec end on its one link), and the driver
(``traffic agent-driver``) runs the chains from another host and records every chain
and hop in the variant's folder. Every process goes on the caller's ExitStack as soon
as it exists.
"""

from __future__ import annotations

import json
import select
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from testbed.core import layout
from testbed.errors import BringUpError
from testbed.host.hosts import Host
from testbed.host.procs import Helper, python_env
from traffic.agent_plan import default_plan

SERVICES = ("retriever", "tool", "model", "agent")
SERVICE_PORT = 7000
TRAFFIC = [sys.executable, "-m", "traffic"]


def wait_line(proc: Helper, text: bytes, timeout: float, what: str) -> None:
    """Block until ``proc`` prints a line equal to ``text``; BringUpError otherwise."""
    assert proc.proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.proc.stdout], [], [], 0.2)
        if ready:
            line = proc.proc.stdout.readline()
            if line.strip() == text:
                return
            if not line:
                break
    raise BringUpError(f"{what} did not become ready in {timeout:g} s")


@dataclass(frozen=True)
class Service:
    """Where one service runs and the addresses it listens on (one per path)."""

    host: Host
    addresses: Sequence[str]


def start_services(services: Mapping[str, Service], *, out: Path, pid_dir: Path,
                   stack: ExitStack, extra: Mapping[str, Sequence[str]] | None = None) -> Path:
    """Start the four services and wait until each listens; write and return the
    driver's plan (every service's addresses and port). ``extra``: more arguments of a
    service, by name (a retriever's object reads)."""
    listen = {svc: start_service(svc, services[svc], out=out, pid_dir=pid_dir, stack=stack,
                                 extra=(extra or {}).get(svc, ()))
              for svc in SERVICES}
    plan = out / layout.AGENT_PLAN
    plan.write_text(json.dumps(default_plan(listen)))
    return plan


def start_service(svc: str, where: Service, *, out: Path, pid_dir: Path, stack: ExitStack,
                  extra: Sequence[str] = (), tag: str = "") -> list[tuple[str, int]]:
    """Start one service (its fixed port, an address per path) and wait until it listens;
    its addresses. ``tag``: a second instance's suffix (a replacement on a spare)."""
    port = SERVICE_PORT + SERVICES.index(svc)
    name = f"{svc}-{tag}" if tag else svc
    argv = [*TRAFFIC, "agent-service", "--role", svc,
            "--stats", str(out / layout.service_stats(name)), *extra]
    for address in where.addresses:
        argv += ["--listen", f"{address}:{port}"]
    proc = where.host.spawn(f"svc-{name}", argv, pid_dir=pid_dir,
                            log=out / layout.service_log(name), env=python_env(),
                            stdout_pipe=True)
    stack.callback(proc.stop)
    # 60 s: a service's Python starts in a second on a lab machine, but took over 15 s in
    # an arm64 lab VM emulated on a busy amd64 host; waiting costs nothing when it is ready
    wait_line(proc, b"ready", 60, f"agent service {name} (see service-{name}.log)")
    return [(address, port) for address in where.addresses]


def start_driver(host: Host, *, out: Path, pid_dir: Path, duration_s: float, seed: int,
                 concurrency: int, timeout_ms: float, stack: ExitStack,
                 extra: Sequence[str] = ()) -> Helper:
    """Start the chain driver on ``host`` with the plan that :func:`start_services` wrote."""
    driver = host.spawn(
        "driver",
        [*TRAFFIC, "agent-driver", "--plan", str(out / layout.AGENT_PLAN),
         "--hops-out", str(out / layout.HOPS), "--chains-out", str(out / layout.CHAINS),
         "--duration", f"{duration_s:g}", "--concurrency", str(concurrency),
         "--timeout-ms", f"{timeout_ms:g}", "--seed", str(seed),
         "--directory", str(out / layout.SERVICE_DIRECTORY), *extra],
        pid_dir=pid_dir, log=out / layout.DRIVER_LOG, env=python_env(),
        stdout_file=out / layout.DRIVER_SUMMARY)
    stack.callback(driver.stop)
    return driver


def count_lines(path: Path) -> int:
    """Records written so far to a JSON-lines file (0 before it exists)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
