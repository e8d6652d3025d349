"""Remove what testbed runs left behind, found by the testbed's own names only.

Leftovers are found by asking the host, not by trusting a list in memory: pid files
under /run/testbed, Mininet host shells named ``mininet:tbXXXX...``, OVS bridges with
the ``testbed_run`` external id or a ``tbXXXX`` name, interfaces, namespaces and
nftables tables (phantom-queue ECN marking, port loss) named ``tbXXXX...``. Nothing else
is touched (unlike ``mn -c``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from testbed.naming import OVS_EXTERNAL_ID, PREFIX, RUN_ROOT, is_owned, live_runs, run_id_of
from testbed.procs import stop_group, wait_for

#: the run ids left alone: a set, or a test of a run id
Skip = Callable[[str | None], bool] | set[str]


def _skipper(skip: Skip) -> Callable[[str | None], bool]:
    if callable(skip):
        return skip
    ids = set(skip)
    return lambda run_id: run_id in ids
MININET_SHELL = re.compile(rf"mininet:{PREFIX}[0-9a-f]{{4}}")


#: words in the command line of every helper the testbed starts (a pid may be reused)
HELPER_WORDS = (b"controllers", b"traffic", b"testbed", b"mnexec", b"iperf3", b"tcpdump",
                b"/usr/lib/frr/")


def _helpers(skip: Skip) -> list[int]:
    """Pids named by pid files (at any depth of a run folder) that still run a helper."""
    skip = _skipper(skip)
    pids = set()
    for pid_file in RUN_ROOT.rglob("*.pid"):
        if skip(pid_file.relative_to(RUN_ROOT).parts[0]):
            continue
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if any(word in cmdline for word in HELPER_WORDS):
            pids.add(pid)
    return sorted(pids)


def _mininet_shells(skip: Skip) -> list[int]:
    skip = _skipper(skip)
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        match = MININET_SHELL.search(cmdline)
        if match and not skip(match.group(0)[len("mininet:tb"):]):
            pids.append(int(proc.name))
    return pids


def _owned_bridges(skip: Skip) -> list[str]:
    skip = _skipper(skip)
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
        tag = re.search(rf"{OVS_EXTERNAL_ID}=\W*([0-9a-f]{{4}})", line)
        run_id = run_id_of(name) or (tag.group(1) if tag else None)
        if (is_owned(name) or tag) and not skip(run_id):
            bridges.append(name)
    return bridges


def _owned_tables(skip: Skip) -> list[tuple[str, str]]:
    """(family, name) of the host's nftables tables named by a run that is not alive."""
    skip = _skipper(skip)
    if shutil.which("nft") is None:
        return []
    done = subprocess.run(["nft", "-j", "list", "tables"], capture_output=True, text=True)
    if done.returncode:
        return []
    tables = []
    for item in json.loads(done.stdout or "{}").get("nftables", []):
        table = item.get("table")
        if table and is_owned(table["name"]) and not skip(run_id_of(table["name"])):
            tables.append((table["family"], table["name"]))
    return tables


def clean(dry_run: bool = False, force: bool = False,
          runs: set[str] | None = None) -> tuple[list[str], dict[str, int]]:
    """Remove testbed leftovers on this host (with ``runs``: only those of these run ids).

    Returns what was (or would be) removed, and the live runs that were left alone: a
    run whose owner process is alive is not a leftover (``force`` removes it too).
    """
    live = {} if force else live_runs()
    if runs is not None:
        live = {r: pid for r, pid in live.items() if r in runs}

    def skip(run_id: str | None) -> bool:
        return run_id in live or (runs is not None and run_id not in runs)

    removed: list[str] = []
    for pid in _helpers(skip):
        removed.append(f"process {pid}")
        if not dry_run:
            _stop(pid)
    for pid in _mininet_shells(skip):
        removed.append(f"Mininet host shell {pid}")
        if not dry_run:
            _stop(pid)
    bridges = _owned_bridges(skip)
    removed += [f"OVS bridge {b}" for b in bridges]
    if bridges and not dry_run:
        argv = ["ovs-vsctl", "-t", "10"]
        for b in bridges:
            argv += ["--", "--if-exists", "del-br", b]
        subprocess.run(argv, capture_output=True)
    for family, table in _owned_tables(skip):  # before the ports their hooks are bound to
        removed.append(f"nftables table {family} {table}")
        if not dry_run:
            subprocess.run(["nft", "delete", "table", family, table], capture_output=True)
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name and is_owned(name) and not skip(run_id_of(name)):
                removed.append(f"interface {name}")
                if not dry_run:
                    try:
                        ipr.link("del", index=link["index"])
                    except NetlinkError as exc:  # its peer may have taken it along
                        if exc.code != errno.ENODEV:
                            raise
    for ns in netns.listnetns():
        if is_owned(ns) and not skip(run_id_of(ns)):
            removed.append(f"namespace {ns}")
            if not dry_run:
                netns.remove(ns)
    if RUN_ROOT.exists():
        for folder in RUN_ROOT.iterdir():
            if skip(folder.name):
                continue
            removed.append(f"run folder {folder}")
            if not dry_run:
                shutil.rmtree(folder, ignore_errors=True)
    return removed, live


def _stop(pid: int) -> None:
    """Stop a helper: its whole group when it leads one, else the process alone."""
    try:
        leader = os.getpgid(pid) == pid
    except ProcessLookupError:
        return
    if leader:
        stop_group(pid, grace=2.0)
        return
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 1.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if wait_for(lambda: not Path(f"/proc/{pid}").exists(), wait, interval=0.02):
            return
