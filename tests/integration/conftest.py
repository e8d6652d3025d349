"""Fixtures for fabric tests: a real fabric with its controller, a leftovers check, and a
quiet host before the tests that measure start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from testbed.host.naming import new_run_id, run_prefix
from testbed.host.procs import parse_cpu_times

#: the tests that measure start once the host has been this idle for QUIET_S in a row
#: (what ran before them, a lab VM or the kernel tearing down many namespaces, can keep
#: it busy for a while after its own processes are gone), waiting at most QUIET_MAX_S
QUIET_IDLE, QUIET_S, QUIET_MAX_S = 0.8, 3, 90


def host_idle(seconds: float = 1.0) -> float:
    """The host's idle share of all CPUs over the next ``seconds`` (iowait counts as idle)."""
    before = parse_cpu_times(Path("/proc/stat").read_text())
    time.sleep(seconds)
    after = parse_cpu_times(Path("/proc/stat").read_text())
    return (after.idle - before.idle) / max(1, after.total - before.total)


@pytest.fixture(scope="session", autouse=True)
def quiet_host() -> None:
    """Wait, once per session, until the host is idle (the shared pass, run by
    pytest-xdist's workers, does not wait: its tests share the host by design; nor does
    the lab VM)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("TESTBED_REQUIRE_FULL_KERNEL"):
        return  # (in the lab VM, under emulation, idle says little of the host)
    start, calm = time.monotonic(), 0
    while calm < QUIET_S and time.monotonic() - start < QUIET_MAX_S:
        calm = calm + 1 if host_idle() >= QUIET_IDLE else 0
    if calm < QUIET_S:
        print(f"\nthe host was not {QUIET_IDLE:.0%} idle for {QUIET_S} s within "
              f"{QUIET_MAX_S} s: the tests start anyway", file=sys.stderr)


def leftovers(prefix: str) -> list[str]:
    """Everything on the host whose name starts with ``prefix`` (a run's own prefix)."""
    found = []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [m for m in re.findall(r"^\d+: ([^:@]+)", links, re.M) if m.startswith(prefix)]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [n.split()[0] for n in netns.splitlines() if n.startswith(prefix)]
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
    found += [b for b in bridges.split() if b.startswith(prefix)]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found += [p for p in procs.splitlines() if f"mininet:{prefix}" in p or f"/{prefix[2:]}/" in p]
    if Path(f"/run/testbed/{prefix[2:]}").exists():
        found.append(f"/run/testbed/{prefix[2:]}")
    return found


def sigint_default() -> None:
    """``preexec_fn`` of a child that a test interrupts with SIGINT: Ctrl-C's default
    disposition, so that Python raises KeyboardInterrupt in it even when the tests run
    with SIGINT ignored (started in the background by a shell without job control,
    which is how CI may start them: the child inherits the ignored signal)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def small_fabric(tmp_path_factory, name: str, *, controller: dict | None = None,
                 switches: dict | None = None, **topology: object) -> Iterator[tuple]:
    """A real fabric: 2 planes of 4 nodes, 2 leaves and 2 spines per plane, 50 Mb/s
    (``topology`` overrides), its controller running with ``controller`` (ECMP if None).
    Yields (live fabric, its ExitStack), ``live.out`` its folder; checks for leftovers
    after the teardown."""
    from testbed.fabric.bringup import bring_up
    from testbed.host.capabilities import probe
    from topologies.leafspine import build_fabric

    run_id = new_run_id()
    prefix = run_prefix(run_id)
    shape = {"planes": 2, "rails": 1, "nodes": 4, "leaves_per_plane": 2,
             "spines_per_plane": 2, "link_mbps": 50, **topology}
    spec = build_fabric(prefix=prefix, **shape)
    out = tmp_path_factory.mktemp(name)
    with ExitStack() as stack:
        live = bring_up(spec, probe(run_id), run_id=run_id,
                        controller=controller or {"mode": "ecmp"}, out=out, stack=stack,
                        switches=switches)
        live.out = out
        yield live, stack
    assert leftovers(prefix) == []


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator:
    """A 2-plane, 4-node fabric with 2 leaves and 2 spines per plane, controller running."""
    with small_fabric(tmp_path_factory, "fabric") as (fabric, _):
        yield fabric
