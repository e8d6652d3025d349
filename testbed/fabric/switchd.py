"""The lab's own Open vSwitch processes for a userspace fabric, a few switches each.

With the userspace datapath, one ovs-vswitchd thread forwards every port it holds, and on
each wake-up it polls every one of them: each poll of an AF_PACKET port allocates (and,
when nothing was there, frees) a batch of 32 MTU-sized buffers. On the host's shared
ovs-vswitchd a packet into one switch paid for all 112 ports of a k=4 fat-tree, under
``--mlockall``, which makes every heap growth dearer still. So a lab runs its own
instances here: each an ``ovsdb-server`` with a database of its own and an
``ovs-vswitchd`` holding only the bridges of its *shard* (:func:`plan`), both helpers of
the run (pid files with start times in the run folder, so ``testbed clean`` finds them
after a SIGKILL), without ``--mlockall``, with glibc's allocator tuned (:data:`MALLOC`),
logs in the results folder. The host's Open vSwitch is never touched, two labs never
share a switch process, and teardown stops the processes.

Each instance's bridges use ``datapath_type=dummy`` under ``--enable-dummy``: that is the
userspace datapath itself (``dpif-netdev``; Open vSwitch registers the same datapath
class under a second name), except that a bridge's own local port lives in memory
instead of being a kernel tap. With ``netdev`` every instance opens a tap named
``ovs-netdev``, and a second instance in the same network namespace fails to. The
switch ports are AF_PACKET ports, as on the host's ``netdev`` bridges; the lab never
uses a bridge's local port (hosts live in namespaces, controllers connect out of band).

Every instance runs in the root namespace, where the switch ports and their shaping
stay, and connects to the lab's controller on 127.0.0.1; nothing here listens on a
network address (the databases and the OpenFlow management sockets are unix sockets in
the run folder).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from testbed.core import layout
from testbed.errors import BringUpError, HostError
from testbed.host.hosts import RootHost
from testbed.host.procs import Helper, wait_for
from topologies.params import Section
from topologies.spec import FabricSpec

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
#: the run folder's sub-folder of the switch processes (databases, sockets, pid files)
FOLDER = "switch"
#: the datapath type of the lab's own bridges (see the module docstring)
DATAPATH_TYPE = "dummy"
#: glibc malloc tunables for every instance (GLIBC_TUNABLES): keep the heap's top instead
#: of trimming it after each poll's batch is freed, keep freed buffers in larger caches
MALLOC: dict[str, int] = {"trim_threshold": 256 << 20, "top_pad": 64 << 20,
                          "tcache_count": 1024, "tcache_max": 16384}
#: the glibc.malloc tunables a scenario may set, with their largest value
MALLOC_KEYS = {"trim_threshold": 1 << 40, "top_pad": 1 << 40, "mmap_threshold": 1 << 25,
               "tcache_count": 65535, "tcache_max": 1 << 20, "arena_max": 64,
               "mmap_max": 1 << 24}
#: seconds an instance may take to answer on its database socket
START_S = 20.0


class SwitchSettings(Section):
    """``switches:``: which Open vSwitch processes forward a userspace fabric."""

    daemon: Literal["lab", "host"] = Field(
        "host", description="host: every switch on the host's Open vSwitch (the only way "
        "with the kernel datapath); lab: with the userspace datapath, the lab's own "
        "ovs-vswitchd processes, a few switches each (python -m bench.switch_cost compares "
        "the two: 2.5x less CPU per forwarding on the k=4 fat-tree at light load, not the "
        "10x aimed at)")
    shards: int | Literal["switch", "pod", "auto"] = Field(
        "auto", description="lab processes: 'switch' (one per switch), 'pod' (a pod's or "
        "leaf group's switches together, the spines or cores of a plane together), a "
        "number N (the switches dealt into N processes by tier and plane), auto "
        "(per switch up to 20 switches, else 4 processes)")
    malloc: dict[str, int] = Field(
        default_factory=lambda: dict(MALLOC),
        description="glibc.malloc tunables of every lab process (GLIBC_TUNABLES), e.g. "
        "trim_threshold, top_pad, tcache_count, tcache_max; {} for glibc's defaults")

    @field_validator("shards")
    @classmethod
    def _shards(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 1024:
            raise ValueError("a number of processes from 1 to 1024")
        return value

    @field_validator("malloc")
    @classmethod
    def _malloc(cls, value: dict[str, int]) -> dict[str, int]:
        for key, number in value.items():
            if key not in MALLOC_KEYS:
                raise ValueError(f"unknown glibc.malloc tunable {key[:40]!r} (known: "
                                 f"{', '.join(sorted(MALLOC_KEYS))})")
            if not 0 <= number <= MALLOC_KEYS[key]:
                raise ValueError(f"{key} must be from 0 to {MALLOC_KEYS[key]}")
        return value

    def lab_daemons(self, kernel_datapath: bool) -> bool:
        """Whether the fabric's switches run in the lab's own processes (never with the
        kernel datapath: its bridges live in the kernel, managed by the host's)."""
        return self.daemon == "lab" and not kernel_datapath


#: ``auto``: one process per switch up to AUTO_SWITCHES switches, else AUTO_SHARDS
#: (measured at 128 switches: 4 processes brought the fabric up in 80 s, 32 had not after
#: 10 minutes, their processes using 1.7-1.9 cores with no traffic yet)
AUTO_SWITCHES = 20
AUTO_SHARDS = 4


def plan(spec: FabricSpec, shards: int | str = "auto") -> list[list[str]]:
    """The switches of each lab process, in the spec's order.

    ``switch``: one each. ``pod``: the switches that serve the same hosts together (a
    fat-tree's pod, a rail group's leaves), every plane's upper tier together. A number
    N: the switches dealt into N processes, keeping a tier and plane together where it
    can. ``auto``: ``switch`` up to :data:`AUTO_SWITCHES` switches, else
    :data:`AUTO_SHARDS` processes.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(planes=2, leaves_per_plane=2, spines_per_plane=1, nodes=2,
    ...                     prefix="tb")
    >>> [len(s) for s in plan(spec, "switch")], plan(spec, 2)[0]
    ([1, 1, 1, 1, 1, 1], ['tbp0l0', 'tbp0l1', 'tbp0s0'])
    """
    names = [sw.name for sw in spec.switches]
    if shards == "auto":
        shards = "switch" if len(names) <= AUTO_SWITCHES else AUTO_SHARDS
    if shards == "switch":
        return [[n] for n in names]
    if shards == "pod":
        groups: dict[tuple, list[str]] = {}
        for sw in spec.switches:
            top = sw.tier == max(s.tier for s in spec.switches if s.plane == sw.plane)
            key = (sw.plane, "top") if top else (sw.plane, sw.group if sw.group is not None
                                                 else sw.index // 2)
            groups.setdefault(key, []).append(sw.name)
        return list(groups.values())
    count = min(int(shards), len(names))
    ordered = sorted(spec.switches, key=lambda s: (s.plane, s.tier, s.index))
    size, extra = divmod(len(ordered), count)
    out, at = [], 0
    for i in range(count):
        n = size + (i < extra)
        out.append([s.name for s in ordered[at:at + n]])
        at += n
    return out


def tunables(malloc: dict[str, int]) -> str:
    """GLIBC_TUNABLES text.

    >>> tunables({"top_pad": 1, "tcache_count": 2})
    'glibc.malloc.top_pad=1:glibc.malloc.tcache_count=2'
    """
    return ":".join(f"glibc.malloc.{k}={v}" for k, v in malloc.items())


@dataclass
class Instance:
    """One lab process pair: its database, its ovs-vswitchd, its bridges."""

    index: int
    bridges: list[str]
    folder: Path
    db: Helper | None = None
    vswitchd: Helper | None = None

    @property
    def db_socket(self) -> Path:
        return self.folder / f"db{self.index}.sock"

    @property
    def remote(self) -> str:
        """``--db`` of ovs-vsctl for this instance."""
        return f"unix:{self.db_socket}"

    @property
    def ctl(self) -> Path:
        """ovs-vswitchd's unixctl socket (``ovs-appctl -t``)."""
        return self.folder / f"vswitchd{self.index}.ctl"


class SwitchDaemons:
    """The lab's switch processes for ``shards`` (lists of bridge names); ``start`` then
    ``stop`` (always). OpenFlow management sockets of every bridge are
    ``FOLDER/BRIDGE.mgmt`` (``ovs-ofctl ... unix:PATH``)."""

    def __init__(self, shards: Sequence[Sequence[str]], *, folder: Path,
                 log_dir: Path | None = None, malloc: dict[str, int] | None = None,
                 binary: str = "ovs-vswitchd", other_config: Sequence[str] = ()):
        self.folder = folder
        self.log_dir = log_dir
        self.malloc = dict(MALLOC if malloc is None else malloc)
        #: the ovs-vswitchd to start, and ``other_config:KEY=VALUE`` words its database
        #: has before it starts (probes try other builds and settings with them)
        self.binary, self.other_config = binary, list(other_config)
        self.instances = [Instance(i, list(bridges), folder) for i, bridges in
                          enumerate(shards)]
        self._of = {b: inst for inst in self.instances for b in inst.bridges}

    # -- lookups -------------------------------------------------------------------------
    def instance(self, bridge: str) -> Instance:
        return self._of[bridge]

    def remote(self, bridge: str) -> str:
        return self._of[bridge].remote

    def mgmt(self, bridge: str) -> str:
        """ovs-ofctl's target for ``bridge``."""
        return f"unix:{self.folder / bridge}.mgmt"

    def pids(self) -> list[int]:
        """The running ovs-vswitchd processes."""
        return [i.vswitchd.pid for i in self.instances if i.vswitchd and i.vswitchd.alive()]

    # -- life ----------------------------------------------------------------------------
    def start(self) -> None:
        """Every instance's database, then every ovs-vswitchd; BringUpError when one does
        not answer in time. All are started before any is waited for."""
        self._start(self.instances)

    def add(self, shards: Sequence[Sequence[str]]) -> list[Instance]:
        """Processes for more bridges (a rack cabled into a running fabric), started now;
        the ones running go on untouched."""
        first = len(self.instances)
        new = [Instance(first + i, list(bridges), self.folder) for i, bridges in
               enumerate(shards)]
        self.instances += new
        self._of.update({b: inst for inst in new for b in inst.bridges})
        self._start(new)
        return new

    def _start(self, instances: Sequence[Instance]) -> None:
        for tool in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl"):
            if shutil.which(tool) is None:
                raise HostError(f"{tool} not found: install the openvswitch-switch package")
        if not SCHEMA.exists():
            raise HostError(f"{SCHEMA} not found: install the openvswitch-common package")
        self.folder.mkdir(parents=True, exist_ok=True)
        for inst in instances:
            conf = self.folder / f"conf{inst.index}.db"
            conf.unlink(missing_ok=True)
            done = RootHost().run(["ovsdb-tool", "create", str(conf), str(SCHEMA)])
            if done.returncode:
                raise BringUpError(f"ovsdb-tool create: {done.stderr.strip()}")
            inst.db = Helper(f"{FOLDER}/ovsdb{inst.index}", [
                "ovsdb-server", str(conf), f"--remote=punix:{inst.db_socket}",
                f"--unixctl={self.folder / f'ovsdb{inst.index}.ctl'}", "--no-chdir",
                *self._log_args(f"ovsdb-server{inst.index}.log")], pid_dir=self.folder.parent,
                log=self._stderr())
        for inst in instances:
            if not wait_for(inst.db_socket.exists, START_S, interval=0.01):
                raise BringUpError(f"ovsdb-server {inst.index} did not start in {START_S:g} s")
            self.vsctl(inst, ["--no-wait", "init"])
            if self.other_config:
                self.vsctl(inst, ["--no-wait", "set", "Open_vSwitch", ".",
                                  *(f"other_config:{w}" for w in self.other_config)])
        # RUNTIME_DIRECTORY: where a DPDK build keeps its run files (under dpdk/)
        env = {**os.environ, "OVS_RUNDIR": str(self.folder),
               "RUNTIME_DIRECTORY": str(self.folder)}
        if self.malloc:
            env["GLIBC_TUNABLES"] = tunables(self.malloc)
        for inst in instances:
            inst.vswitchd = Helper(f"{FOLDER}/vswitchd{inst.index}", [
                self.binary, inst.remote, "--enable-dummy", f"--unixctl={inst.ctl}",
                "--no-chdir", *self._log_args(f"ovs-vswitchd{inst.index}.log")],
                pid_dir=self.folder.parent, log=self._stderr(), env=env)
        for inst in instances:
            if not wait_for(inst.ctl.exists, START_S, interval=0.01):
                raise BringUpError(f"ovs-vswitchd {inst.index} did not start in {START_S:g} s "
                                   f"(see {self.log_dir or self.folder})")

    def _log_args(self, name: str) -> list[str]:
        where = self.log_dir or self.folder
        return ["-vconsole:off", "-vsyslog:off", "-vfile:info", f"--log-file={where / name}"]

    def _stderr(self) -> Path | None:
        return (self.log_dir / layout.SWITCH_PROCESSES_LOG) if self.log_dir else None

    def vsctl(self, inst: Instance, args: Sequence[str], timeout: float = 30.0) -> str:
        """One ovs-vsctl transaction on ``inst``'s database; BringUpError on failure."""
        done = RootHost().run(["ovs-vsctl", f"--db={inst.remote}", f"--timeout={timeout:g}",
                               *args], timeout=timeout + 5)
        if done.returncode:
            raise BringUpError(f"ovs-vsctl on switch process {inst.index}: "
                               f"{done.stderr.strip()[:300]}")
        return done.stdout

    def stop(self) -> None:
        """Every ovs-vswitchd, then every database: each SIGTERM, a bounded wait, SIGKILL."""
        for inst in self.instances:
            if inst.vswitchd is not None:
                inst.vswitchd.stop(grace=5.0)
        for inst in self.instances:
            if inst.db is not None:
                inst.db.stop()
