"""Remove what testbed runs left behind, found by the testbed's own names only.

Leftovers are found by asking the host, not by trusting a list in memory: pid files
under /run/testbed, Mininet host shells named ``mininet:tbXXXX...``, OVS bridges with
the ``testbed_run`` external id or a ``tbXXXX`` name, interfaces and namespaces named
``tbXXXX...``. Nothing else is touched (unlike ``mn -c``).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from testbed.naming import OVS_EXTERNAL_ID, PREFIX, RUN_ROOT, is_owned
from testbed.procs import stop_group

MININET_SHELL = re.compile(rf"mininet:{PREFIX}[0-9a-f]{{4}}")


#: words in the command line of every helper the testbed starts (a pid may be reused)
HELPER_WORDS = (b"controllers", b"traffic", b"testbed", b"mnexec", b"iperf3", b"tcpdump",
                b"/usr/lib/frr/")


def _helper_groups() -> list[int]:
    """Process groups named by pid files that still run one of the testbed's helpers."""
    groups = []
    for pid_file in RUN_ROOT.glob("*/*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if any(word in cmdline for word in HELPER_WORDS):
            groups.append(pid)
    return groups


def _mininet_shells() -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if MININET_SHELL.search(cmdline):
            pids.append(int(proc.name))
    return pids


def _owned_bridges() -> list[str]:
    if shutil.which("ovs-vsctl") is None:
        return []
    done = subprocess.run(
        ["ovs-vsctl", "-t", "5", "--format=csv", "--no-headings", "--columns=name,external_ids",
         "list", "Bridge"], capture_output=True, text=True)
    if done.returncode:
        return []
    bridges = []
    for line in done.stdout.splitlines():
        name = line.split(",", 1)[0].strip('"')
        if is_owned(name) or f"{OVS_EXTERNAL_ID}=" in line:
            bridges.append(name)
    return bridges


def clean(dry_run: bool = False) -> list[str]:
    """Remove every testbed leftover on this host; returns what was (or would be) removed."""
    removed: list[str] = []
    for pgid in _helper_groups():
        removed.append(f"process group {pgid}")
        if not dry_run:
            stop_group(pgid, grace=2.0)
    for pid in _mininet_shells():
        removed.append(f"Mininet host shell {pid}")
        if not dry_run:
            if _is_group_leader(pid):
                stop_group(pid, grace=1.0)
            else:
                _kill(pid)
    bridges = _owned_bridges()
    removed += [f"OVS bridge {b}" for b in bridges]
    if bridges and not dry_run:
        argv = ["ovs-vsctl", "-t", "10"]
        for b in bridges:
            argv += ["--", "--if-exists", "del-br", b]
        subprocess.run(argv, capture_output=True)
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and is_owned(name):
                removed.append(f"interface {name}")
                if not dry_run:
                    try:
                        ipr.link("del", index=link["index"])
                    except NetlinkError as exc:  # its peer may have taken it along
                        if exc.code != errno.ENODEV:
                            raise
    for ns in netns.listnetns():
        if is_owned(ns):
            removed.append(f"namespace {ns}")
            if not dry_run:
                netns.remove(ns)
    if RUN_ROOT.exists():
        for folder in RUN_ROOT.iterdir():
            removed.append(f"run folder {folder}")
            if not dry_run:
                shutil.rmtree(folder, ignore_errors=True)
    return removed


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
