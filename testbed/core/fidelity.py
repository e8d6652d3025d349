"""Is the host keeping up? A fidelity monitor beside every variant, and its verdict.

An emulator's numbers are only as good as its ability to keep up: here one thread of
ovs-vswitchd forwards every packet of every switch, and the shapers of every link run
on the same two cores as the generators. A run on a busy host looks as valid as one on
an idle host unless something watches. Mininet-HiFi (Handigol et al., CoNEXT 2012)
monitored every experiment (CPU, and packet timing on busy links) and flagged the runs
that missed; this module does the same, once a second, for the duration of a variant:

* the host's idle CPU (``/proc/stat``, all CPUs, iowait counts as idle);
* the switch processes' CPU in cores: every ovs-vswitchd of the run (the lab's own,
  :mod:`testbed.fabric.switchd`, found by their pid files, and the host's), summed, and the
  busiest thread of any of them: in the userspace datapath without PMD threads that is
  the thread that forwards every frame of its process's switches;
* the lab's own processes: those whose pid files lie under the run folders
  (``/run/testbed/RUNID/``, any depth) that this process owns, their process groups, and
  every descendant of the runner (controller, generators, FRR daemons, forwarders,
  Mininet's node shells); the runner itself apart; and everything else (other users'
  work, kernel threads), what is left of the busy CPU;
* saturated links: a watched link (a shaped egress queue; the kind names them) is read
  at both ends of an interval, and between them every quarter of a second while its
  last read found a backlog. What its root qdisc held at a read, it owes the wire before
  the next read, as far as its rate allows in that time: a shaper served on time sends
  about the sum over the reads of min(backlog, rate x time to the next read), at least,
  whatever else arrives and leaves in between; a queue that emptied between two reads
  (bursts, short TCP exchanges) owes only what it held. The link counts as saturated
  over the interval when it owed at least half a second at its rate (no judgement rests
  on one or two reads), and its delivery is then the bytes its qdisc sent over the
  interval against what it owed. A shaper that sent less than it owed was not served in
  time. The bound is not exact: a shaper dequeues whole frames (a 9,000-byte frame is
  7 ms at 10 Mb/s), a netem delay line sends late, and a read's time is taken after
  the netlink dump; hence the 10 % margin below. What it cannot see: a queue that holds
  less than an eighth of a second of its rate never owes half a second (64 KB at
  10-20 Mb/s, the queues of the fabric scenarios and labs, is 26-52 ms), so such
  links are not judged, and a starved host shows in the CPU checks only (which fired
  first in every starved run measured, below). Judged are deep queues: the backbone's,
  the MACsec wires', lossless classes' buffers. Known false causes there: a class that
  PFC pauses keeps its backlog and sends nothing, and a fault that lowers a link's rate
  leaves the monitor owing it at the configured one.

Samples go to ``fidelity.jsonl`` in the variant's folder (one line a second). Only the
samples inside the kind's measured window (``RunContext.watch``: traffic, not bring-up
and teardown) are judged, when the kind opens one; otherwise every sample is. A sample
is inside when its whole interval is: the one that began before the window opened (the
generators getting ready) is not judged, nor the one that ends after it closed.

Thresholds and the verdict: :mod:`testbed.core.fidelity_verdict`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.core.fidelity_verdict import THRESHOLDS, Thresholds, top_helpers, verdict
from testbed.host import netlink
from testbed.host.naming import OWNER, RUN_ROOT
from testbed.host.netlink import QueueReader
from testbed.host.procs import (
    CpuTimes,
    ProcStat,
    host_switch_pid,
    parse_cpu_times,
    parse_proc_stat,
)

log = logging.getLogger(__name__)

#: where the host's ovs-vswitchd's pid file is (None: where procs.host_switch_pid looks,
#: $OVS_RUNDIR included, as Open vSwitch's own tools do)
OVS_PID_FILES: tuple[Path, ...] | None = None
NETNS_DIR = Path("/run/netns")
PROC = Path("/proc")
#: backlog reads per interval (the sample's own and the polls between): what a link's
#: queue held at each, it owes the wire until the next
BACKLOG_READS = 4
#: a link is judged over an interval only when it owed at least this share of it at its rate
OWED_MIN = 0.5
HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class WatchedLink:
    """A shaped egress queue: the interface (in ``netns``, None for the host's own) whose
    root qdisc sends at ``mbps``. ``min_backlog`` bytes: what the queue holds without
    being saturated (packets in a netem delay line), 0 without delay."""

    netns: str | None
    ifname: str
    mbps: float
    min_backlog: int = 0

    @property
    def name(self) -> str:
        return f"{self.netns}/{self.ifname}" if self.netns else self.ifname




def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def helper_label(argv: list[str], comm: str) -> str:
    """What a helper process is, for the monitor's top list: a Python module or script
    (with the generators' subcommand), else the program's name.

    >>> helper_label(["/x/.venv/bin/python", "-m", "traffic", "training", "--rank", "1"], "p")
    'traffic training'
    >>> helper_label(["python3", "-m", "testbed.fabric.pfc", "--config", "c"], "python3")
    'testbed.fabric.pfc'
    >>> helper_label(["/usr/lib/frr/ospfd", "-f", "x"], "ospfd"), helper_label([], "bash")
    ('ospfd', 'bash')
    """
    if not argv:
        return comm
    name = Path(argv[0]).name
    if not name.startswith("python"):
        return name
    rest = argv[1:]
    if "-m" in rest[:-1]:
        i = rest.index("-m")
        module = rest[i + 1]
        sub_cmd = rest[i + 2] if module == "traffic" and len(rest) > i + 2 else ""
        return f"{module} {sub_cmd}".strip()
    script = next((a for a in rest if not a.startswith("-")), "")
    return Path(script).name or name


def _label(pid: int, comm: str) -> str:
    raw = _read(PROC / str(pid) / "cmdline") or ""
    return helper_label([a for a in raw.split("\0") if a], comm)


def _stat(path: Path) -> ProcStat | None:
    text = _read(path)
    if not text:
        return None
    try:
        return parse_proc_stat(text)
    except (IndexError, ValueError):
        return None


def ovs_pid() -> int | None:
    """The host's ovs-vswitchd's pid, or None when it does not run."""
    return host_switch_pid(OVS_PID_FILES, PROC)


def switch_pids(folders: Iterable[Path]) -> list[int]:
    """The lab's own ovs-vswitchd processes (:mod:`testbed.fabric.switchd`: pid files
    ``switch/vswitchd*.pid`` of ``folders``) that run, and the host's ovs-vswitchd when
    it runs."""
    pids = set()
    for folder in folders:
        for path in (folder / "switch").glob("vswitchd*.pid"):
            words = (_read(path) or "").split()
            if words and words[0].isdigit() and (PROC / words[0]).exists():
                pids.add(int(words[0]))
    host = ovs_pid()
    return sorted(pids | ({host} if host is not None else set()))


def owned_run_dirs(owner: int, root: Path = RUN_ROOT) -> list[Path]:
    """The run folders (``/run/testbed/RUNID``) whose owner is process ``owner``."""
    try:
        owners = list(root.glob(f"*/{OWNER}"))
    except OSError:
        return []
    # an owner file is "PID START_TIME" (testbed.host.naming.pid_record)
    return [p.parent for p in owners if (_read(p) or "").split()[:1] == [str(owner)]]


def helper_pids(folders: Iterable[Path]) -> set[int]:
    """The pids in every ``*.pid`` file under ``folders``, at any depth."""
    pids = set()
    for folder in folders:
        try:
            files = list(folder.rglob("*.pid"))
        except OSError:
            continue
        for path in files:
            words = (_read(path) or "").split()  # "PID START_TIME", or a bare pid
            if words and words[0].isdigit():
                pids.add(int(words[0]))
    return pids


def owed(link: WatchedLink, backlog: int, seconds: float) -> float:
    """Bytes a served shaper sends before its next read, ``seconds`` later, of the
    ``backlog`` its queue holds now (a delay line's ``min_backlog`` is not a queue).

    >>> lk = WatchedLink(None, "tb1a2bp0l0e1", 10)
    >>> owed(lk, 64_000, 0.25), owed(lk, 900_000, 0.25)
    (64000, 312500.0)
    """
    return min(max(0, backlog - link.min_backlog), link.mbps * 1e6 / 8 * seconds)


def link_sample(link: WatchedLink, before: tuple[int, int], after: tuple[int, int],
                interval_s: float, owed_bytes: float) -> dict:
    """One link over one interval from its root qdisc's (bytes sent, backlog bytes) at
    both ends and the bytes it ``owed`` the wire over it (:func:`owed`, summed over the
    reads): saturated when it owed at least :data:`OWED_MIN` of the interval at its
    rate; its delivery is then what it sent against what it owed.

    >>> lk = WatchedLink(None, "tb1a2bp0l0e1", 100)
    >>> link_sample(lk, (0, 3000), (11_250_000, 1500), 1.0, 12_500_000)
    {'link': 'tb1a2bp0l0e1', 'mbps': 90.0, 'backlog': 1500, 'saturated': True, 'delivered': 0.9}
    >>> link_sample(lk, (0, 3000), (11_250_000, 1500), 1.0, 3000)["saturated"]
    False
    """
    sent = max(0, after[0] - before[0])
    mbps = sent * 8 / interval_s / 1e6 if interval_s > 0 else 0.0
    saturated = owed_bytes >= OWED_MIN * link.mbps * 1e6 / 8 * interval_s
    out = {"link": link.name, "mbps": round(mbps, 2), "backlog": after[1],
           "saturated": saturated}
    if saturated:
        out["delivered"] = round(sent / owed_bytes, 3)
    return out


# -- sampling (the host) -------------------------------------------------------------------
def netlink_socket_in(name: str) -> socket.socket:
    """An unbound NETLINK_ROUTE socket inside the named namespace."""
    return netlink.route_socket(NETNS_DIR / name, kind=socket.SOCK_DGRAM, bind=False)


class _Netns:
    """Per namespace, opened when first needed: a netlink socket for root-qdisc dumps
    (parsed for the counters only, :class:`~testbed.host.netlink.QueueReader`: pyroute2
    parsed every attribute of every qdisc, most of a second per dump on a 128-switch
    fabric) and, for another namespace than ours, pyroute2 for index lookups."""

    def __init__(self) -> None:
        self.sockets: dict[str | None, Any] = {}
        self.readers: dict[str | None, QueueReader] = {}
        self.index: dict[tuple[str | None, str], int] = {}

    def _ipr(self, netns: str | None):
        from pyroute2 import IPRoute

        if netns not in self.sockets:
            self.sockets[netns] = (IPRoute() if netns is None else
                                   IPRoute(fileno=netlink_socket_in(netns).detach()))
        return self.sockets[netns]

    def _reader(self, netns: str | None) -> QueueReader:
        if netns not in self.readers:
            self.readers[netns] = QueueReader(
                sock=None if netns is None else netlink_socket_in(netns))
        return self.readers[netns]

    def queues(self, links: list[WatchedLink]) -> dict[str, tuple[int, int, float]]:
        """(bytes sent, backlog, monotonic time of the read) of each link's root qdisc;
        links that are gone are left out."""
        by_ns: dict[str | None, list[WatchedLink]] = {}
        for lk in links:
            by_ns.setdefault(lk.netns, []).append(lk)
        out = {}
        for netns, group in by_ns.items():
            try:
                roots = self._reader(netns).dump()
                read_at = time.monotonic()
            except OSError as exc:  # the namespace went (teardown)
                log.debug("fidelity: %s: %s", netns, exc)
                self.close(netns)
                continue
            for lk in group:
                index = self._index(lk)
                q = roots.get(index) if index else None
                if q is None:
                    self.index.pop((lk.netns, lk.ifname), None)
                    continue
                out[lk.name] = (q.sent_bytes, q.backlog_bytes, read_at)
        return out

    def _index(self, lk: WatchedLink) -> int | None:
        key = (lk.netns, lk.ifname)
        if key not in self.index:
            try:
                if lk.netns is None:
                    found = [socket.if_nametoindex(lk.ifname)]
                else:
                    found = self._ipr(lk.netns).link_lookup(ifname=lk.ifname)
            except OSError:
                found = []
            if not found:
                return None
            self.index[key] = found[0]
        return self.index[key]

    def close(self, netns: str | None = ...) -> None:  # type: ignore[assignment]
        """Close one namespace's sockets (or all): a socket keeps its namespace alive."""
        names = set(self.sockets) | set(self.readers) if netns is ... else {netns}
        for name in names:
            ipr = self.sockets.pop(name, None)
            if ipr is not None:
                ipr.close()
            reader = self.readers.pop(name, None)
            if reader is not None:
                reader.close()
        self.index = {k: v for k, v in self.index.items() if k[0] in self.readers}


class _Cpu:
    """CPU deltas between two samples: host, ovs-vswitchd, the lab's helpers, the runner."""

    def __init__(self, owner: int, run_root: Path = RUN_ROOT) -> None:
        self.owner, self.run_root = owner, run_root
        self.host: CpuTimes | None = None
        self.ovs: dict[int, int] = {}  # tid -> ticks
        self.helpers: dict[int, int] = {}
        self.labels: dict[int, str] = {}  # pid -> what it is (read once)
        self.runner: int | None = None
        self.boot_tick = 0.0  # uptime at the previous sample, in ticks

    def sample(self, interval_s: float) -> dict:
        baseline = self.host is None
        host = parse_cpu_times(_read(PROC / "stat") or "")
        uptime = float((_read(PROC / "uptime") or "0").split()[0]) * HZ
        out: dict[str, Any] = {"cpus": host.cpus}
        if not baseline and host.total > self.host.total:
            out["host_idle"] = round((host.idle - self.host.idle)
                                     / (host.total - self.host.total), 3)
        self.host = host
        scale = HZ * interval_s
        # every switch process (the host's, and the lab's own, several of them), each of
        # its threads judged on its own
        switches = switch_pids(owned_run_dirs(self.owner, self.run_root))
        threads: dict[int, tuple[str, int]] = {}
        for pid in switches:
            for task in _tasks(pid):
                st = _stat(task / "stat")
                if st is not None:
                    threads[int(task.name)] = (st.comm, st.ticks)
        if threads and self.ovs:
            deltas = {tid: ticks - self.ovs.get(tid, ticks) for tid, (_, ticks) in
                      threads.items()}
            busiest = max(deltas, key=deltas.get)
            out["ovs_processes"] = len(switches)
            out["ovs_cores"] = round(sum(deltas.values()) / scale, 3)
            out["ovs_thread_cores"] = round(deltas[busiest] / scale, 3)
            out["ovs_thread"] = threads[busiest][0]
        self.ovs = {tid: ticks for tid, (_, ticks) in threads.items()}
        exclude = {self.owner, *switches}
        helpers, members = self._helpers(exclude)
        if not baseline:
            by_kind: dict[str, float] = {}
            for p, (ticks, start, comm) in helpers.items():
                used = ticks - self.helpers.get(p, ticks if start <= self.boot_tick else 0)
                if p not in self.labels:
                    self.labels[p] = _label(p, comm)
                by_kind[self.labels[p]] = by_kind.get(self.labels[p], 0.0) + used / scale
            out["helpers_cores"] = round(sum(by_kind.values()), 3)
            out["helpers"] = members
            out["helpers_top"] = top_helpers(by_kind)
        self.helpers = {p: ticks for p, (ticks, _, _) in helpers.items()}
        self.labels = {p: label for p, label in self.labels.items() if p in helpers}
        me = _stat(PROC / str(self.owner) / "stat")
        if me is not None:
            if self.runner is not None:
                out["runner_cores"] = round((me.ticks - self.runner) / scale, 3)
            self.runner = me.ticks
        self.boot_tick = uptime
        if "host_idle" in out and "helpers_cores" in out:
            busy = host.cpus * (1 - out["host_idle"])
            out["other_cores"] = round(max(0.0, busy - out.get("ovs_cores", 0)
                                           - out["helpers_cores"]
                                           - out.get("runner_cores", 0)), 3)
        return out

    def _helpers(self, exclude: set[int | None]
                 ) -> tuple[dict[int, tuple[int, int, str]], int]:
        """Every process of the run: (ticks, start tick, name) by pid, and how many. The run's
        processes are those in its pid files and their groups (daemons that left the
        runner's tree, FRR), and every descendant of the runner (helpers started
        without a pid file: MACsec forwarders, Mininet's node shells)."""
        groups = helper_pids(owned_run_dirs(self.owner, self.run_root)) - exclude
        stats: dict[int, ProcStat] = {}
        for entry in os.scandir(PROC):
            if entry.name.isdigit() and int(entry.name) not in exclude:
                st = _stat(PROC / entry.name / "stat")
                if st is not None:
                    stats[int(entry.name)] = st
        children: dict[int, list[int]] = {}
        for p, st in stats.items():
            children.setdefault(st.ppid, []).append(p)
        members = {p for p, st in stats.items() if p in groups or st.pgrp in groups}
        todo = list(children.get(self.owner, ()))
        while todo:
            p = todo.pop()
            if p not in members:
                members.add(p)
                todo += children.get(p, ())
        found = {p: (stats[p].ticks, stats[p].start, stats[p].comm) for p in members}
        return found, len(found)


def _tasks(pid: int) -> list[Path]:
    try:
        return list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return []


class Monitor:
    """Samples the host once a second into ``path`` while a variant runs; use as a
    context manager (or ``start``/``stop``); :attr:`result` is the verdict after stop."""

    def __init__(self, path: Path, thresholds: Thresholds = THRESHOLDS,
                 owner: int | None = None, run_root: Path = RUN_ROOT,
                 enabled: bool = True) -> None:
        """``owner``: the process whose run folders (under ``run_root``) hold the helpers'
        pid files (this one by default). ``enabled`` False: nothing is sampled (to
        measure what the monitor itself costs); the verdict then says so."""
        self.enabled = enabled
        self.path = path
        self.thresholds = thresholds
        self.samples: list[dict] = []
        self.result: dict | None = None
        self._cpu = _Cpu(owner if owner is not None else os.getpid(), run_root)
        self._netns = _Netns()
        self._links: list[WatchedLink] = []
        self._queues: dict[str, tuple[int, int, float]] = {}  # at the last sample
        self._read: dict[str, tuple[int, float]] = {}  # (backlog, time) at the last read
        self._owed: dict[str, float] = {}  # bytes owed since the last sample
        self._measuring = False
        self._opened = 0.0  # when the measured window opened (monotonic)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0.0
        self._file = None

    # -- the measured window --------------------------------------------------------------
    def watch(self, links: Iterable[WatchedLink] = ()) -> None:
        """From now on samples are judged, and ``links`` are watched."""
        with self._lock:
            self._links += list(links)
            if not self._measuring:
                self._opened = time.monotonic()
            self._measuring = True

    def unwatch(self) -> None:
        """End of the measured window: stop watching links (before their teardown)."""
        with self._lock:
            self._links, self._queues, self._measuring = [], {}, False
            self._read, self._owed = {}, {}
            self._netns.close()

    @contextmanager
    def watching(self, links: Iterable[WatchedLink] = ()) -> Iterator[None]:
        self.watch(links)
        try:
            yield
        finally:
            self.unwatch()

    # -- the thread -----------------------------------------------------------------------
    def start(self) -> Monitor:
        if not self.enabled:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w")  # noqa: SIM115 (closed in stop)
        self._sample()  # the baseline the first interval is measured from
        self._thread = threading.Thread(target=self._run, name="fidelity", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop sampling; returns (and keeps in :attr:`result`) the verdict."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5 * self.thresholds.interval_s + 5)
        with self._lock:
            self._netns.close()
            if self._file is not None:
                self._file.close()
                self._file = None
        self.result = verdict(self.samples, self.thresholds)
        if not self.enabled:
            self.result["reasons"] = ["not monitored (testbed run --no-fidelity)"]
            self.result["disabled"] = True
        return self.result

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        step = self.thresholds.interval_s / BACKLOG_READS
        deadline, tick = time.monotonic() + step, 1
        while not self._stop.wait(max(0.0, deadline - time.monotonic())):
            try:
                if tick % BACKLOG_READS == 0:
                    self._sample()
                else:
                    self._poll()
            except Exception:  # a monitor must never take a run down with it
                log.exception("fidelity sample failed")
            deadline, tick = deadline + step, tick + 1
            if deadline < time.monotonic():  # fell behind (a starved host): no catch-up burst
                deadline = time.monotonic() + step

    def _poll(self) -> None:
        """Between samples: what each link that held a backlog at its last read owed
        since, and what it holds now. (A link read empty owes nothing until the next
        sample reads it again: the bound stays a lower one.)"""
        with self._lock:
            queued = [lk for lk in self._links if lk.name in self._read
                      and self._read[lk.name][0] > lk.min_backlog]
            if not queued:
                return
            self._settle(queued, self._netns.queues(queued))

    def _settle(self, links: list[WatchedLink], now: dict[str, tuple[int, int, float]]) -> None:
        """Add what ``links`` owed since their last read to :attr:`_owed`; ``now`` becomes
        their last read. A link not read now owes nothing more until a sample reads it
        again."""
        for lk in links:
            last = self._read.pop(lk.name, None)
            if lk.name not in now:
                continue
            backlog, at = now[lk.name][1:]
            if last is not None:
                self._owed[lk.name] = (self._owed.get(lk.name, 0.0)
                                       + owed(lk, last[0], at - last[1]))
            self._read[lk.name] = (backlog, at)

    def _sample(self) -> None:
        with self._lock:
            now = time.monotonic()
            interval = now - self._last if self._last else 0.0
            self._last = now
            cpu = self._cpu.sample(interval or self.thresholds.interval_s)
            queues = self._netns.queues(self._links) if self._links else {}
            if not interval:  # the baseline
                self._queues, self._owed = queues, {}
                self._read = {name: q[1:] for name, q in queues.items()}
                return
            self._settle(self._links, queues)
            # each link over the time between its own reads (a first socket into a
            # namespace can take a while); too short a time says nothing
            links, kept, owing = [], dict(self._queues), {}
            for lk in self._links:
                before, after = self._queues.get(lk.name), queues.get(lk.name)
                if before is None or after is None:
                    kept.pop(lk.name, None)
                    if after is not None:
                        kept[lk.name] = after
                elif after[2] - before[2] >= 0.5 * self.thresholds.interval_s:
                    links.append(link_sample(lk, before[:2], after[:2], after[2] - before[2],
                                             self._owed.get(lk.name, 0.0)))
                    kept[lk.name] = after
                elif lk.name in self._owed:  # judged over a longer span next time
                    owing[lk.name] = self._owed[lk.name]
            self._queues, self._owed = kept, owing
            record = {"t": round(time.time(), 3), "interval_s": round(interval, 3),
                      "measuring": self._measuring and now - interval >= self._opened,
                      **cpu,
                      "links": len(links),
                      "saturated": [{k: lk[k] for k in ("link", "delivered", "backlog")}
                                    for lk in links if lk["saturated"]]}
            self.samples.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record) + "\n")
                self._file.flush()

