"""Names of what a run creates: the ``tb`` prefix plus the run's short id.

Everything on the host carries ``PREFIX + run_id``, and every name a run creates on the
host is also *registered* in the run's folder (:func:`register`, right after creating
it). ``testbed clean`` removes only registered names (or OVS bridges tagged with
:data:`OVS_EXTERNAL_ID`), never a name merely because it looks like the testbed's: an
interface ``tbface0`` that somebody else made is not ours. Processes are recorded with
their start time (:func:`pid_record`), so a pid reused by another process is not ours
either.
"""

from __future__ import annotations

import fcntl
import grp
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PREFIX = "tb"
RUN_ROOT = Path("/run/testbed")
OVS_EXTERNAL_ID = "testbed_run"
OWNER = "owner"  # file in a run folder: the pid (and start time) of the process that runs it
NAMES = "names"  # file in a run folder: one "KIND NAME" line per name the run created
#: file in a run folder without an owner: the process that registered its first name
REGISTRAR = "registrar"
#: file in a run folder: one "DEVICE INODE COOKIE" line per unnamed network namespace the
#: run made (a Mininet host's), for ``testbed clean`` once its processes are gone
NETNS_IDS = "netns-ids"
#: kinds of registered names; an ``nft`` name is "FAMILY TABLE"
KINDS = ("link", "netns", "bridge", "nft", "mininet")
#: names the testbed gives to interfaces, namespaces and bridges: tb + 4 hex digits
OWNED_NAME = re.compile(rf"^{PREFIX}[0-9a-f]{{4}}")


def new_run_id() -> str:
    """A short random id, unique among the runs on one host, whose prefix no name uses.

    An id whose prefix starts an existing interface or namespace name is skipped, so a
    run never creates a name that somebody else already uses.
    """
    while True:
        run_id = secrets.token_hex(2)
        if not (RUN_ROOT / run_id).exists() and not _prefix_in_use(run_prefix(run_id)):
            return run_id


def _prefix_in_use(prefix: str) -> bool:
    for folder in (Path("/sys/class/net"), Path("/run/netns")):
        try:
            if any(name.startswith(prefix) for name in os.listdir(folder)):
                return True
        except OSError:
            continue
    return False


def run_prefix(run_id: str) -> str:
    """``tb`` + run id: the start of every name the run creates.

    >>> run_prefix("1a2b")
    'tb1a2b'
    """
    return PREFIX + run_id


#: the prefix of the names of a fabric built without a run (to check a scenario, to
#: print or draw its spec); a run's names carry its own (:func:`run_prefix`)
SPEC_PREFIX = PREFIX + "0000"


def run_dir(run_id: str) -> Path:
    """Folder for the run's pid files and sockets (removed at teardown)."""
    return RUN_ROOT / run_id


def is_owned(name: str) -> bool:
    """Whether an interface, namespace or bridge name is one the testbed makes.

    >>> is_owned("tb1a2bp0l1e3"), is_owned("tbx"), is_owned("eth0")
    (True, False, False)
    """
    return OWNED_NAME.match(name) is not None


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22), or None.

    With the pid it names one process for the life of the host: a pid is reused, a
    (pid, start time) pair is not.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # field 2 (comm) is in parentheses and may hold spaces; field 3 follows the last ")"
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[22 - 3])


def pid_record(pid: int) -> str:
    """Text of a pid file: ``PID START_TIME`` (see :func:`recorded_pid`)."""
    return f"{pid} {start_time(pid)}\n"


def recorded_pid(text: str) -> int | None:
    """The pid of a pid file's text if that very process still runs, else None.

    A file with only a pid (written by someone else, or before start times were
    recorded) proves nothing and gives None.

    >>> recorded_pid(pid_record(os.getpid())) == os.getpid()
    True
    >>> recorded_pid(f"{os.getpid()} 1"), recorded_pid(str(os.getpid())), recorded_pid("x")
    (None, None, None)
    """
    try:
        pid_text, start_text = text.split()
        pid, started = int(pid_text), int(start_text)
    except ValueError:
        return None
    if start_time(pid) != started:
        return None
    try:  # a zombie has ended: only its exit status waits for a parent that may never ask
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return None if stat[stat.rindex(")") + 2:].startswith("Z") else pid


#: the one group beside root that may pass through the run folders: FRR's daemons drop
#: to it and open their configs and sockets under ``/run/testbed/RUNID/frr``
DAEMON_GROUP = "frr"


def _private(folder: Path) -> None:
    """Make ``folder`` if missing; root alone may list it, and only :data:`DAEMON_GROUP`
    (where it exists) may pass through it: mode 0710 root:frr, else 0700."""
    folder.mkdir(mode=0o700, exist_ok=True)
    try:
        gid: int | None = grp.getgrnam(DAEMON_GROUP).gr_gid
    except KeyError:
        gid = None
    st = folder.stat()
    if gid is not None and st.st_gid != gid:
        os.chown(folder, -1, gid)
    mode = 0o700 if gid is None else 0o710
    if st.st_mode & 0o777 != mode:
        os.chmod(folder, mode)


def private_run_dir(run_id: str) -> Path:
    """The run's folder, made private (:func:`_private`) with ``/run/testbed`` above it."""
    _private(RUN_ROOT)
    folder = run_dir(run_id)
    _private(folder)
    return folder


def claim(run_id: str) -> Path:
    """Create the run's folder and record this process as its owner (for ``clean``)."""
    folder = private_run_dir(run_id)
    (folder / OWNER).write_text(pid_record(os.getpid()))
    return folder


def _alive(record: Path) -> int | None:
    """The pid in an owner or registrar file if that process still runs, else None.

    A bare pid (no start time: written by an older testbed) counts as alive while some
    process has that pid: leaving a run alone is the safe side.
    """
    try:
        text = record.read_text()
    except OSError:
        return None
    pid = recorded_pid(text)
    if pid is None and text.strip().isdigit() and Path(f"/proc/{text.strip()}").exists():
        pid = int(text.strip())
    return pid


def live_runs() -> dict[str, int]:
    """Run ids whose owner (or, before a claim, registrar) process is still alive, with
    its pid."""
    live = {}
    if not RUN_ROOT.is_dir():
        return live
    for folder in RUN_ROOT.iterdir():
        for record in (OWNER, REGISTRAR):
            pid = _alive(folder / record)
            if pid is not None:
                live[folder.name] = pid
                break
    return live


@contextmanager
def _locked(run_id: str, file: str, mode: str) -> Iterator:
    folder = private_run_dir(run_id)
    with open(folder / file, mode) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield f


def register(run_id: str, kind: str, name: str) -> None:
    """Record that run ``run_id`` created ``name`` on this host; call right after creating it.

    ``kind`` is one of :data:`KINDS`. Only registered names are removed by ``testbed
    clean`` (with OVS bridges that carry the run's external id).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind of name {kind!r}")
    if not name or "\n" in name:
        raise ValueError(f"bad name {name!r}")
    folder = run_dir(run_id)
    with _locked(run_id, NAMES, "a") as f:
        f.write(f"{kind} {name}\n")
        if not (folder / OWNER).exists() and not (folder / REGISTRAR).exists():
            # not claimed (a probe, a test): alive while this process is
            (folder / REGISTRAR).write_text(pid_record(os.getpid()))


def register_owned(kind: str, name: str) -> None:
    """:func:`register` a name built from a run prefix, under the run id it carries."""
    run_id = run_id_of(name)
    if run_id is None:
        raise ValueError(f"{name!r} carries no run prefix")
    register(run_id, kind, name)


def forget(run_id: str, kind: str, name: str) -> None:
    """Drop a registration (the name was removed); the file goes when it is empty."""
    path = run_dir(run_id) / NAMES
    if not path.exists():
        return
    with _locked(run_id, NAMES, "r+") as f:
        lines = [line for line in f.read().splitlines() if line != f"{kind} {name}"]
        f.seek(0)
        f.truncate()
        f.write("".join(line + "\n" for line in lines))
    if not lines:
        path.unlink(missing_ok=True)
        registrar = path.parent / REGISTRAR
        if registrar.exists() and recorded_pid(registrar.read_text()) == os.getpid():
            registrar.unlink()
        try:
            path.parent.rmdir()  # a folder that held nothing else (no owner, no pid file)
        except OSError:
            pass


def registered(run_id: str) -> dict[str, set[str]]:
    """The names run ``run_id`` registered, by kind (empty when none).

    >>> registered("zzzz")
    {}
    """
    try:
        text = (run_dir(run_id) / NAMES).read_text()
    except OSError:
        return {}
    names: dict[str, set[str]] = {}
    for line in text.splitlines():
        kind, _, name = line.partition(" ")
        if kind in KINDS and name:
            names.setdefault(kind, set()).add(name)
    return names


def register_netns(run_id: str, path: str) -> tuple[int, int, int | None] | None:
    """Record the network namespace at ``path`` (a ``/proc/PID/ns/net``) as made by run
    ``run_id``; call right after making it. A Mininet host's namespace has no name: it is
    held by its shell, which dies with the process that started it, while what was started
    in it and detached (``testbed exec LAB n4 -- iperf3 -s -D``) lives on there; ``testbed
    clean`` finds those by this record (:func:`registered_netns`). The host's own
    namespace (pid 1's, ours) is never recorded. Returns what was recorded (None: nothing).
    """
    from testbed.host.netns import identity

    found = identity(path)
    if found is None or found[:2] in _host_netns():
        return None
    with _locked(run_id, NETNS_IDS, "a") as f:
        f.write(f"{found[0]} {found[1]} {'-' if found[2] is None else found[2]}\n")
    return found


def registered_netns(run_id: str) -> dict[tuple[int, int], int | None]:
    """The namespaces run ``run_id`` recorded: (device, inode) -> cookie (None: the kernel
    had none to give).

    >>> registered_netns("zzzz")
    {}
    """
    try:
        text = (run_dir(run_id) / NETNS_IDS).read_text()
    except OSError:
        return {}
    out: dict[tuple[int, int], int | None] = {}
    for line in text.splitlines():
        try:
            dev, ino, cookie = line.split()
            out[(int(dev), int(ino))] = None if cookie == "-" else int(cookie)
        except ValueError:  # a torn last line
            continue
    return out


def _host_netns() -> set[tuple[int, int]]:
    """(device, inode) of the host's own network namespace: pid 1's (when readable) and
    this process's."""
    found = set()
    for path in ("/proc/1/ns/net", "/proc/self/ns/net"):
        try:
            st = os.stat(path)
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def run_id_of(name: str) -> str | None:
    """The run id inside an owned name.

    >>> run_id_of("tb1a2bp0l1e3"), run_id_of("eth0")
    ('1a2b', None)
    """
    return name[len(PREFIX):len(PREFIX) + 4] if is_owned(name) else None
