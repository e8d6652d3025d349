"""A process detached in a node's namespace does not outlive the node (stop_strays)."""

from __future__ import annotations

import subprocess

import pytest

from testbed.host.procs import netns_inode, stop_strays, wait_for

pytestmark = pytest.mark.root


def test_strays_in_a_shells_namespace_stop_and_the_shell_and_host_stay():
    shell = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    outside = subprocess.Popen(["sleep", "60"])  # the host's namespace: never touched
    try:
        # unshare has made its namespace (pid 1's may be unreadable: compare with ours)
        assert wait_for(lambda: netns_inode(shell.pid) not in (None, netns_inode("self")), 5)
        # detached like `iperf3 -s -D`: its own session, parent gone
        subprocess.run(["nsenter", "-t", str(shell.pid), "-n", "setsid", "-f", "sleep", "60"],
                       check=True)
        space = netns_inode(shell.pid)
        assert wait_for(lambda: len(_in(space)) == 2, 5), _in(space)
        stray, = set(_in(space)) - {shell.pid}
        assert stop_strays([shell.pid]) == [stray]
        assert _in(space) == [shell.pid]
        assert shell.poll() is None and outside.poll() is None
        # a "shell" in the host's namespace names no stray: the host is never swept
        assert stop_strays([outside.pid]) == []
        assert outside.poll() is None
    finally:
        for proc in (shell, outside):
            proc.kill()
            proc.wait()


def _in(space: int) -> list[int]:
    import os

    return sorted(int(e.name) for e in os.scandir("/proc")
                  if e.name.isdigit() and netns_inode(e.name) == space)
