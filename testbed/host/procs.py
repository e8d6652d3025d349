"""Helper processes in their own process groups, stopped by group.

Each process gets a pid file in the run folder, with its start time, so that ``testbed
clean`` can find it even after the runner itself was killed, and can tell it from a
later process that got the same pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed import REPO
from testbed.errors import Interrupted
from testbed.host.naming import pid_record

#: the start gate of a helper (see :class:`Helper`): one line on stdin, then the program
#: with stdin from /dev/null
GATE = 'read -r _ || exit 97; exec "$@" </dev/null'


#: prctl(2)'s request to be signalled when the parent dies
PR_SET_PDEATHSIG = 1


def dies_with_parent() -> None:
    """``preexec_fn`` of a child that must not outlive the process that started it (a lab
    supervisor killed with SIGKILL takes its ssh connections with it, and with them the
    servers' parts): SIGTERM when that process ends."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def python_env() -> dict[str, str]:
    """The environment of a Python helper process (a generator, forwarder, agent): this
    checkout first on PYTHONPATH, so ``python -m`` finds the lab's own packages."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


class Helper:
    """A long-running process (controller, generator) in its own process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        pid_dir: Path,
        log: Path | None = None,
        env: dict[str, str] | None = None,
        stdout_pipe: bool = False,
        stdout_file: Path | None = None,
        pass_fds: Sequence[int] = (),
    ):
        self.name = name
        self.argv = list(argv)
        self.pid_file = pid_dir / f"{name}.pid"
        self._log = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        self._out = open(stdout_file, "wb") if stdout_file else None  # noqa: SIM115
        if stdout_pipe:
            stdout = subprocess.PIPE
        else:
            stdout = self._out or self._log
        # the helper waits at a gate until its pid file exists (a starter killed before
        # writing it leaves no process that clean cannot find: the gate's read sees EOF
        # and the helper never starts); the gate is a shell that then execs the program,
        # so the pid, its start time and the process group stay the program's
        gate_r, gate_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                ["sh", "-c", GATE, self.argv[0], *self.argv],
                stdin=gate_r,
                stdout=stdout,
                stderr=self._log,
                env=env,
                start_new_session=True,
                pass_fds=tuple(pass_fds),  # inherited by the program (a forwarder's keys)
            )
        finally:
            os.close(gate_r)
        try:
            pid_dir.mkdir(parents=True, exist_ok=True)
            self.pid_file.write_text(pid_record(self.proc.pid))
            os.write(gate_w, b"go\n")
        finally:
            os.close(gate_w)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 3.0) -> int | None:
        """SIGTERM to the group, a bounded wait, then SIGKILL; returns the exit code."""
        stop_group(self.proc.pid, grace, lambda: self.proc.poll() is not None)
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        if self.proc.stdout:
            self.proc.stdout.close()
        for f in (self._log, self._out):
            if hasattr(f, "close"):
                f.close()
        self.pid_file.unlink(missing_ok=True)
        return code


def _stat(path: Path) -> tuple[str, int] | None:
    """State and process group of ``/proc/PID/stat`` at ``path`` (None: gone)."""
    try:
        stat = path.read_text()
    except OSError:
        return None
    state, _, pgrp = stat[stat.rindex(")") + 2:].split(None, 3)[:3]
    return state, int(pgrp)


def live_groups(pgids: set[int], proc: Path = Path("/proc")) -> set[int]:
    """Those of the process groups ``pgids`` with a member that is not a zombie. A
    member that exited is gone, also while its parent has not reaped it yet (an init
    that reaps by polling keeps a zombie for seconds)."""
    left = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:  # not even a zombie
            continue
        left.add(pgid)
    if not left:
        return left
    alive = set()
    for entry in os.scandir(proc):
        if entry.name.isdigit() and (st := _stat(proc / entry.name / "stat")) \
                and st[1] in left and st[0] not in "ZX":
            alive.add(st[1])
    return alive


def live_processes(pids: set[int], proc: Path = Path("/proc")) -> set[int]:
    """Those of ``pids`` that run: not gone, not a zombie waiting to be reaped."""
    return {pid for pid in pids
            if (st := _stat(proc / str(pid) / "stat")) and st[0] not in "ZX"}


def _stop_all(ids: Sequence[int], grace: float, send: Callable[[int, int], None],
              alive: Callable[[set[int]], set[int]], gone: Callable[[], bool] | None) -> None:
    """SIGTERM to each of ``ids`` by ``send``, wait up to ``grace`` s until ``alive``
    finds none, then SIGKILL to those left (``gone``: called while waiting, to reap a
    leader that is our child)."""
    left = set(ids)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        for one in list(left):
            try:
                send(one, sig)
            except ProcessLookupError:
                left.discard(one)

        def all_gone() -> bool:
            if gone:
                gone()  # reaps the leader, whose zombie would keep the group alive
            left.intersection_update(alive(left))
            return not left

        if not left or wait_for(all_gone, wait, interval=0.02):
            return


def stop_groups(pgids: Sequence[int], grace: float,
                gone: Callable[[], bool] | None = None) -> None:
    """Stop the process groups ``pgids`` together: SIGTERM to each, wait up to ``grace``
    s for all, then SIGKILL to those left."""
    _stop_all(pgids, grace, os.killpg, live_groups, gone)


def stop_processes(pids: Sequence[int], grace: float) -> None:
    """Stop the processes ``pids`` (not their groups) together, as :func:`stop_groups`."""
    _stop_all(pids, grace, os.kill, live_processes, None)


def stop_group(pgid: int, grace: float, gone: Callable[[], bool] | None = None) -> None:
    """Stop process group ``pgid``: SIGTERM, wait up to ``grace`` s, then SIGKILL."""
    stop_groups([pgid], grace, gone)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (from /proc); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def netns_inode(pid: int | str) -> int | None:
    """The inode of process ``pid``'s network namespace (``"self"``: ours), or None when
    it is gone or unreadable."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def stop_strays(shells: Sequence[int], grace: float = 1.0) -> list[int]:
    """Stop every process that shares a network namespace with one of ``shells`` (the
    namespaces' own processes, say Mininet's host shells), the shells left running:
    what a user started there by hand and detached (``iperf3 -s -D``) would keep the
    namespace alive after the shells end. Never the host's own namespace: ours, nor
    pid 1's (which an init may keep unreadable, as a microVM's does).
    SIGTERM, up to ``grace`` s, then SIGKILL; returns the pids found."""
    spaces = {netns_inode(pid) for pid in shells} - {None, netns_inode("self"), netns_inode(1)}
    keep = set(shells) | {os.getpid()}
    strays = [int(e.name) for e in os.scandir("/proc")
              if e.name.isdigit() and int(e.name) not in keep
              and netns_inode(e.name) in spaces]
    # still in one of those namespaces: a pid that ended is not signalled again
    _stop_all(strays, grace, os.kill, lambda left: {p for p in left
                                                    if netns_inode(p) in spaces}, None)
    return strays


#: where the host's Open vSwitch keeps ovs-vswitchd's pid
HOST_SWITCH_PID_FILES = (Path("/run/openvswitch/ovs-vswitchd.pid"),
                         Path("/var/run/openvswitch/ovs-vswitchd.pid"))


def host_switch_pid(files: tuple[Path, ...] | None = None,
                    proc: Path = Path("/proc")) -> int | None:
    """The host's ovs-vswitchd (from its pid file, running in ``proc``), or None. Its pid
    file is looked for where Open vSwitch's own tools look: under ``$OVS_RUNDIR`` when
    that is set (an Open vSwitch run elsewhere, as the fresh-switch bench's), else in
    :data:`HOST_SWITCH_PID_FILES`."""
    if files is None:
        rundir = os.environ.get("OVS_RUNDIR")
        files = (Path(rundir) / "ovs-vswitchd.pid",) if rundir else HOST_SWITCH_PID_FILES
    for path in files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (proc / text).exists():
            return int(text)
    return None


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Interrupted`, so ExitStacks unwind as on Ctrl-C.

    Does nothing off the main thread or when a caller already installed a handler.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- /proc parsing (pure) ----------------------------------------------------------------
@dataclass(frozen=True)
class CpuTimes:
    """The ``cpu`` line of ``/proc/stat``: ticks in total and idle (incl. iowait)."""

    total: int
    idle: int
    cpus: int


def parse_cpu_times(text: str) -> CpuTimes:
    """``/proc/stat``: the aggregate line's ticks (guest time is inside user already).

    >>> parse_cpu_times("cpu  10 0 5 80 5 0 0 0 0 0\\ncpu0 5 0 2 40 3 0 0 0 0 0\\n"
    ...                 "cpu1 5 0 3 40 2 0 0 0 0 0\\nintr 1\\n")
    CpuTimes(total=100, idle=85, cpus=2)
    """
    total = idle = cpus = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = [int(v) for v in line.split()[1:9]]  # user..steal
            total, idle = sum(ticks), ticks[3] + ticks[4]
        elif line.startswith("cpu"):
            cpus += 1
    return CpuTimes(total, idle, max(cpus, 1))


@dataclass(frozen=True)
class ProcStat:
    """What a ``/proc/PID/stat`` line says about CPU: parent, group, ticks used, start tick."""

    comm: str
    ppid: int
    pgrp: int
    ticks: int
    start: int


def parse_proc_stat(text: str) -> ProcStat:
    """One ``/proc/PID/stat`` (or ``task/TID/stat``) line; the name may hold spaces and
    parentheses, so fields are counted from the last ``)``.

    >>> parse_proc_stat("42 (a (b) c) S 1 42 42 0 -1 4194560 9 0 0 0 "
    ...                 "150 25 0 0 20 0 3 0 12345 1 2 3")
    ProcStat(comm='a (b) c', ppid=1, pgrp=42, ticks=175, start=12345)
    """
    head, _, rest = text.rpartition(")")
    comm = head.split("(", 1)[1]
    fields = rest.split()  # fields[0] is field 3 (state)
    return ProcStat(comm=comm, ppid=int(fields[1]), pgrp=int(fields[2]),
                    ticks=int(fields[11]) + int(fields[12]), start=int(fields[19]))
