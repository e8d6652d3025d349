"""``testbed clean`` finds a dead run's processes by its network namespaces.

A run that died (its owner process gone) left a named namespace it registered with a
detached process inside and no pid file, and a Mininet-style host (a shell named
``mininet:NODE`` in a namespace of its own) with a daemon started in it, as ``testbed
exec lab n0 iperf3 -s -D`` leaves one. Clean must stop every one of them and remove the
namespace; a process in the host's namespace is never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.host.cleanup import _netns_id, clean, netns_processes
from testbed.host.naming import new_run_id, register, run_dir, run_prefix
from testbed.host.procs import wait_for

pytestmark = pytest.mark.root


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _sleepers(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_clean_stops_what_lives_in_a_dead_runs_namespaces():
    run_id = new_run_id()
    prefix = run_prefix(run_id)
    ns, node = f"{prefix}x", f"{prefix}n0"
    # the owner claims the run and dies
    subprocess.run([sys.executable, "-c", f"from testbed.host.naming import claim; "
                                          f"claim({run_id!r})"], check=True)
    marker = f"{run_id}{os.getpid()}"  # a sleep length unique to this test
    secs = f"6{int(marker, 16) % 100000}"
    bystander = subprocess.Popen(["sleep", secs])  # the host's namespace: left alone
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        register(run_id, "netns", ns)
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", f"sleep {secs} >/dev/null &"],
                       check=True)
        register(run_id, "mininet", node)
        subprocess.Popen(["unshare", "-n", "bash", "-c",
                          f"sleep {secs} >/dev/null & exec -a mininet:{node} sleep {secs}"],
                         start_new_session=True)
        time.sleep(0.5)
        pids = [p for p in _sleepers(f"sleep {secs}") if p != bystander.pid]
        shells = _sleepers(f"mininet:{node}")
        assert len(pids) == 2 and len(shells) == 1, (pids, shells)
        pids += shells
        removed, _ = clean(dry_run=True, only={run_id})
        assert sum("in a namespace of the run" in r for r in removed) == 2, removed
        removed, _ = clean(only={run_id})
        assert not [p for p in pids if _alive(p)], removed
        assert _alive(bystander.pid)
        assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                        text=True).stdout
        assert not run_dir(run_id).exists()
    finally:
        bystander.kill()
        bystander.wait()
        for pid in _sleepers(f"sleep {secs}") + _sleepers(f"mininet:{node}"):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_the_hosts_namespace_is_never_a_runs():
    root = os.stat("/proc/self/ns/net")  # clean runs in the host's
    assert netns_processes({(root.st_dev, root.st_ino)}) == []


def _record(run_id: str, dev: int, ino: int, cookie: int | None) -> None:
    from testbed.host.naming import NETNS_IDS, private_run_dir

    with open(private_run_dir(run_id) / NETNS_IDS, "a") as f:
        f.write(f"{dev} {ino} {'-' if cookie is None else cookie}\n")


@pytest.mark.parametrize("same_namespace", [True, False], ids=["recorded", "inode-reused"])
def test_a_recorded_namespace_counts_only_with_its_cookie(same_namespace):
    """A dead run recorded a namespace (a Mininet host's, whose shell is gone): a process
    in it is stopped. Once that namespace is freed, the kernel gives its inode number to
    the next one: a process there, with the inode and not the cookie, is left alone."""
    from testbed.host.naming import register_netns
    from testbed.host.netns import identity

    run_id = new_run_id()
    subprocess.run([sys.executable, "-c", f"from testbed.host.naming import claim; "
                                          f"claim({run_id!r})"], check=True)  # owner gone
    other = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        path = f"/proc/{other.pid}/ns/net"
        assert wait_for(lambda: _netns_id(path) not in (None, _netns_id("/proc/self/ns/net")),
                        5)
        if same_namespace:
            assert register_netns(run_id, path) == identity(path)
        else:  # the record of a namespace that had this inode before
            dev, ino, cookie = identity(path)
            _record(run_id, dev, ino, cookie + 1)
        removed, _ = clean(only={run_id})
        assert (f"process {other.pid} (sleep) in a namespace of the run" in removed) \
            == same_namespace, removed
        assert (other.wait(5) if same_namespace else other.poll()) == (
            -signal.SIGTERM if same_namespace else None)
        assert not run_dir(run_id).exists()
    finally:
        other.kill()
        other.wait()


def test_the_hosts_namespace_is_never_recorded_nor_swept():
    from testbed.host.naming import register_netns, registered_netns
    from testbed.host.netns import identity

    run_id = new_run_id()
    assert register_netns(run_id, "/proc/self/ns/net") is None
    assert registered_netns(run_id) == {}
    # a record naming it anyway (written by hand) sweeps nothing
    subprocess.run([sys.executable, "-c", f"from testbed.host.naming import claim; "
                                          f"claim({run_id!r})"], check=True)
    _record(run_id, *identity("/proc/self/ns/net"))
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        removed, _ = clean(only={run_id})
        assert not [r for r in removed if r.startswith("process")], removed
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
