"""Remove what testbed runs left behind: only what a run provably made.

Leftovers are found by asking the host, not by trusting a list in memory, and each is
checked against a run's own records in /run/testbed/RUNID: a process only when its pid
file's start time matches the running process (a reused pid is somebody else's), an
interface, namespace, nftables table or Mininet shell only when the run registered its
name (:func:`testbed.host.naming.register`), an OVS bridge when registered or tagged with the
``testbed_run`` external id, and any process in a network namespace the run made: a named
one it registered, a live Mininet shell's, or one whose identity it recorded when it made
it (:func:`testbed.host.naming.register_netns`: a Mininet host's, whose shell died with
the run while what was started there lives on). A name that merely looks like the
testbed's (``tbface0``) is not touched, nor anything of a run whose owner is alive (unlike
``mn -c``). Host sysctls that a killed run left raised go back to the saved originals
(:mod:`testbed.host.sysctls`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from testbed.host import sysctls as host_settings
from testbed.host.naming import (
    OVS_EXTERNAL_ID,
    RUN_ROOT,
    live_runs,
    recorded_pid,
    registered,
    registered_netns,
)
from testbed.host.netns import cookie
from testbed.host.procs import stop_groups, stop_processes

MININET_SHELL = re.compile(r"mininet:(\S+)")


def _dead_runs(skip: set[str]) -> list[str]:
    """Ids of the run folders whose run is not alive (and not in ``skip``)."""
    if not RUN_ROOT.is_dir():
        return []
    return sorted(f.name for f in RUN_ROOT.iterdir() if f.is_dir() and f.name not in skip)


def _helpers(runs: list[str]) -> list[int]:
    """Pids named by pid files (at any depth of a run folder) whose process still runs.

    A pid file proves a process only with its start time (see :func:`recorded_pid`).
    """
    pids = set()
    for run_id in runs:
        for pid_file in (RUN_ROOT / run_id).rglob("*.pid"):
            try:
                pid = recorded_pid(pid_file.read_text())
            except OSError:
                continue
            if pid is not None and pid != os.getpid():
                pids.add(pid)
    return sorted(pids)


def _mininet_shells(nodes: set[str]) -> list[int]:
    """Pids of the Mininet shells (``mininet:NODE``) of registered nodes."""
    pids = []
    if not nodes:
        return pids
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        match = MININET_SHELL.search(cmdline)
        if match and match.group(1) in nodes:
            pids.append(int(proc.name))
    return pids


def _netns_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of the network namespace behind ``path`` (a /run/netns entry or a
    process's ns/net), or None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def netns_processes(namespaces: set[tuple[int, int]],
                    proc: Path = Path("/proc")) -> list[int]:
    """Pids of every process in one of ``namespaces`` (what a run started in its hosts
    and detached keeps them alive: ``iperf3 -s -D``, a forwarder without a pid file).
    The host's own namespace is never one of them."""
    host = _netns_id(str(proc / "1" / "ns" / "net"))
    namespaces = namespaces - {host, _netns_id(f"/proc/{os.getpid()}/ns/net")}
    if not namespaces:
        return []
    pids = []
    for entry in proc.glob("[0-9]*"):
        if int(entry.name) != os.getpid() and _netns_id(str(entry / "ns" / "net")) in namespaces:
            pids.append(int(entry.name))
    return sorted(pids)


def recorded_processes(recorded: dict[tuple[int, int], int | None],
                       proc: Path = Path("/proc")) -> list[int]:
    """Pids of every process in a namespace a run recorded when it made it ((device,
    inode) -> cookie, :func:`testbed.host.naming.registered_netns`). An inode number is
    given to a new namespace once the recorded one is freed: a namespace counts only when
    its cookie, which the kernel never gives twice, is the recorded one (so, on a kernel
    without cookies, none does). The host's own namespace never counts."""
    by_space: dict[tuple[int, int], list[int]] = {}
    for pid in netns_processes(set(recorded), proc):
        space = _netns_id(str(proc / str(pid) / "ns" / "net"))
        if space is not None:
            by_space.setdefault(space, []).append(pid)
    found = []
    for space, pids in by_space.items():
        want = recorded.get(space)
        if want is None:
            continue
        # the namespace's cookie, through the first of its processes still in it
        for pid in pids:
            path = proc / str(pid) / "ns" / "net"
            got = cookie(path)
            if got is not None and _netns_id(str(path)) == space:
                break
        else:
            continue
        if got == want:
            found += pids
    return sorted(found)


def bridge_tags(ovs_json: str) -> dict[str, str | None]:
    """Each bridge's ``testbed_run`` external id (None without one), from ovs-vsctl JSON.

    >>> bridge_tags('{"headings": ["name", "external_ids"], "data": ['
    ...             '["tb1a2bs0", ["map", [["testbed_run", "1a2b"]]]], ["br0", ["map", []]]]}')
    {'tb1a2bs0': '1a2b', 'br0': None}
    """
    table = json.loads(ovs_json or "{}")
    tags = {}
    for name, external_ids in table.get("data", []):
        ids = dict(external_ids[1]) if external_ids and external_ids[0] == "map" else {}
        tags[name] = ids.get(OVS_EXTERNAL_ID)
    return tags


def _owned_bridges(skip: set[str], names: set[str], only: set[str] | None = None) -> list[str]:
    """Bridges registered by a dead run, or tagged with the id of a run that is not alive
    (and, given ``only``, one of those runs)."""
    if shutil.which("ovs-vsctl") is None:
        return []
    done = subprocess.run(
        ["ovs-vsctl", "-t", "5", "--format=json", "--columns=name,external_ids", "list",
         "Bridge"], capture_output=True, text=True)
    if done.returncode:
        return []
    return [name for name, tag in bridge_tags(done.stdout).items()
            if (tag is not None and tag not in skip and (only is None or tag in only))
            or (tag is None and name in names)]


def _owned_tables(names: set[str]) -> list[tuple[str, str]]:
    """(family, name) of the host's nftables tables that a dead run registered."""
    if not names or shutil.which("nft") is None:
        return []
    done = subprocess.run(["nft", "-j", "list", "tables"], capture_output=True, text=True)
    if done.returncode:
        return []
    tables = []
    for item in json.loads(done.stdout or "{}").get("nftables", []):
        table = item.get("table")
        if table and f"{table['family']} {table['name']}" in names:
            tables.append((table["family"], table["name"]))
    return tables


def clean(dry_run: bool = False, force: bool = False,
          only: set[str] | None = None,
          elsewhere: Callable[[Path, str, bool], list[str]] | None = None,
          ) -> tuple[list[str], dict[str, int]]:
    """Remove testbed leftovers on this host.

    Returns what was (or would be) removed, and the live runs that were left alone: a
    run whose owner process is alive is not a leftover (``force`` removes it too).
    ``only``: consider these run ids alone (the host's sysctls are then left as they are).
    ``elsewhere(run folder, run id, dry_run)``: what a dead run left on other machines,
    removed before its folder goes (the command line passes the cluster's own; the
    host layer knows nothing of other machines).
    """
    live = {} if force else live_runs()
    skip = set(live)
    runs = [r for r in _dead_runs(skip) if only is None or r in only]
    names: dict[str, set[str]] = {}
    for run_id in runs:
        for kind, found in registered(run_id).items():
            names.setdefault(kind, set()).update(found)
    removed: list[str] = []
    helpers = _helpers(runs)
    removed += [f"process {pid}" for pid in helpers]
    if not dry_run:
        _stop(helpers)
    shells = _mininet_shells(names.get("mininet", set()))
    # every process in a namespace of the run, found by the namespace, not by a pid file:
    # the Mininet hosts' (through their shells while they live, else as recorded when
    # they were made) and the named ones it registered
    spaces = {_netns_id(f"/proc/{pid}/ns/net") for pid in shells} | {
        _netns_id(f"/run/netns/{ns}") for ns in names.get("netns", set())}
    recorded: dict[tuple[int, int], int | None] = {}
    for run_id in runs:
        recorded.update(registered_netns(run_id))
    inside = sorted((set(netns_processes({s for s in spaces if s is not None}))
                     | set(recorded_processes(recorded))) - set(shells))
    removed += [f"process {pid} ({_comm(pid)}) in a namespace of the run" for pid in inside]
    if not dry_run:  # each by itself: its process group may reach outside the namespace
        stop_processes(inside, grace=2.0)
    removed += [f"Mininet host shell {pid}" for pid in shells]
    if not dry_run:
        _stop(shells)
    bridges = _owned_bridges(skip, names.get("bridge", set()), only)
    removed += [f"OVS bridge {b}" for b in bridges]
    if bridges and not dry_run:
        argv = ["ovs-vsctl", "-t", "10"]
        for b in bridges:
            argv += ["--", "--if-exists", "del-br", b]
        subprocess.run(argv, capture_output=True)
    for family, table in _owned_tables(names.get("nft", set())):  # before their ports
        removed.append(f"nftables table {family} {table}")
        if not dry_run:
            subprocess.run(["nft", "delete", "table", family, table], capture_output=True)
    links = names.get("link", set())
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name in links:
                removed.append(f"interface {name}")
                if not dry_run:
                    try:
                        ipr.link("del", index=link["index"])
                    except NetlinkError as exc:  # its peer may have taken it along
                        if exc.code != errno.ENODEV:
                            raise
    for ns in netns.listnetns():
        if ns in names.get("netns", set()):
            removed.append(f"namespace {ns}")
            if not dry_run:
                netns.remove(ns)
    restored = ([] if only is not None
                else host_settings.restore_saved(dry_run=dry_run, force=force))
    removed += [f"raised host setting {name} (back to {value})" for name, value in restored]
    for run_id in runs if elsewhere else ():  # a fabric spread over several machines
        removed += elsewhere(RUN_ROOT / run_id, run_id, dry_run)
    for run_id in runs:
        folder = RUN_ROOT / run_id
        removed.append(f"run folder {folder}")
        if not dry_run:
            shutil.rmtree(folder, ignore_errors=True)
    return removed, live


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _stop(pids: list[int]) -> None:
    """Stop processes, all together: the whole group of each that leads one, else the
    process alone (SIGTERM, up to 2 s, then SIGKILL)."""
    leaders, single = [], []
    for pid in pids:
        try:
            (leaders if os.getpgid(pid) == pid else single).append(pid)
        except ProcessLookupError:
            continue
    stop_groups(leaders, grace=2.0)
    stop_processes(single, grace=2.0)
