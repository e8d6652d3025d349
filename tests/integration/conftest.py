"""Fixtures for fabric tests: a real fabric with its controller, and a leftovers check."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from testbed.host.naming import new_run_id, run_prefix


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
