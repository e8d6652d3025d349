"""One fabric over several machines: this machine's part built here, every other
machine's part built there by the lab's own code, the links between machines carried in
GRE.

Mininet's cluster edition (``mininet.examples.cluster``) is the model: a placement of
every node on a server, links between servers as gretap pairs with a key per link, one
shared ssh connection per server, commands in a remote node through ``mnexec -a`` over
that connection. Where the lab parts from it, and why:

* A server builds its part itself (:mod:`testbed.cluster.remote`, over the same ssh
  connection), with the bring-up every one-machine fabric uses: veths, addresses and
  shaping over netlink and ``tc -batch`` in one process. The cluster edition runs every
  node command through a shell over ssh: tens of round trips per link on a lab that
  makes thousands of them.
* Tunnels carry the fabric's MTU (the underlay must be 42 bytes larger: checked before
  anything is made) instead of the cluster edition's fixed 1450, which would cut the
  lab's jumbo frames; their keys hold the run id, so two labs between the same machines
  do not collide.
* The controller stays on this machine's loopback; each server reaches it through an ssh
  reverse forward on its own loopback. The cluster edition points switches at the
  controller machine's outward address, which means a listener other machines can
  reach.
* Every server is checked before anything is made (:func:`testbed.cluster.servers.check`).
* A part that loses its ssh connection (this machine crashed, the network went) tears
  itself down; ``testbed clean`` on the server removes what a killed part left.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import queue
import stat
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

from testbed.cluster import placement as placing
from testbed.cluster.remote import READ_MAX_BYTES
from testbed.cluster.servers import ROOT, Connection, Server, check, source_address
from testbed.core import fidelity_verdict
from testbed.errors import BringUpError, HostError, ServerAnswerError
from testbed.fabric.net import Fabric, FabricTimes, Tunnel
from testbed.host.hosts import Host
from testbed.host.naming import run_dir
from testbed.host.procs import Helper, dies_with_parent
from topologies.spec import FabricSpec

#: seconds a server's part may take to come up (its capability probe, its bridges; the
#: lab VMs of make cluster-test run under software emulation)
PART_READY_S = 300.0
PART_STOP_S = 120.0
#: characters of one answer line of a part: a ``read`` answer at its bound, base64, with
#: room for its paths (a longer line ends the part)
ANSWER_MAX_CHARS = READ_MAX_BYTES * 4 // 3 + (4 << 20)


def tunnel_key(run_id: str, index: int) -> int:
    """A cut link's tunnel key (GRE's key, VXLAN's 24-bit network id): 12 bits of the run
    id, then 12 of the link's number (two labs between the same machines collide once in
    4,096 pairs of run ids, which the tunnel's creation then refuses).

    >>> hex(tunnel_key("1a2b", 3))
    '0xa2b004'
    """
    try:
        run = int(run_id, 16) & 0xFFF
    except ValueError:
        run = zlib.crc32(run_id.encode()) & 0xFFF
    return (run << 12) | ((index + 1) & 0xFFF)


def tunnels(spec: FabricSpec, place: placing.Placement, addresses: Callable[[int, int], str],
            run_id: str, kind: str = "gretap") -> list[list[Tunnel]]:
    """Each machine's tunnel ends; ``addresses(m, n)`` is machine m's address towards n.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tb1a2b", nodes=4, leaves_per_plane=2,
    ...                     spines_per_plane=2)
    >>> ends = tunnels(spec, placing.place(spec, 2), lambda m, n: f"10.0.0.{m + 1}", "1a2b")
    >>> [len(e) for e in ends], ends[0][0].local, ends[0][0].remote, ends[1][0].local
    ([2, 2], '10.0.0.1', '10.0.0.2', '10.0.0.2')
    """
    out: list[list[Tunnel]] = [[] for _ in range(place.machines)]
    for index, lk in enumerate(place.cut):
        ma, mb = place.where[lk.a], place.where[lk.b]
        key = tunnel_key(run_id, index)
        mac = spec.host(lk.a).interface_by_name(lk.a_intf).mac if lk.kind == "host" else None
        out[ma].append(Tunnel(lk.a_intf, lk.a, lk.a_port, addresses(ma, mb), addresses(mb, ma),
                              key, mac, kind))
        out[mb].append(Tunnel(lk.b_intf, lk.b, lk.b_port, addresses(mb, ma), addresses(ma, mb),
                              key, None, kind))
    return out


@dataclass(frozen=True)
class RemoteHost(Host):
    """A fabric host on another machine: its commands go through the lab's ssh connection
    to that machine and enter the host with ``mnexec -a`` (as the cluster edition's
    RemoteNode does). A helper started there writes its pid to the run's folder on that
    machine, so that stopping it here stops it there."""

    name: str
    pid: int
    conn: Connection
    run_folder: str
    #: keeps the files its helpers name the same on both machines (None: a host entered
    #: from a lab's record, for commands only)
    mirror: Mirror | None = None

    def _inside(self, argv: Sequence[str]) -> list[str]:
        """``argv`` in the host's namespace there, the lab's packages on its path."""
        return ["env", f"PYTHONPATH={ROOT}", "mnexec", "-a", str(self.pid), *argv]

    def argv(self, argv: Sequence[str]) -> list[str]:
        return self.conn.argv(self._inside(argv))

    def spawn(self, name: str, argv: Sequence[str], *, pid_dir: Path, log: Path | None = None,
              env: dict[str, str] | None = None, stdout_pipe: bool = False,
              stdout_file: Path | None = None) -> Helper:
        pid_file = f"{self.run_folder}/remote-{self.name}-{name}.pid"
        # the script is a constant: the pid file and the command are its arguments
        remote = self.conn.argv(["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh",
                                 pid_file, *self._inside(argv)])
        files = self.mirror.watch(argv) if self.mirror is not None else []
        return RemoteHelper(name, remote, pid_dir=pid_dir, log=log, env=env,
                            stdout_pipe=stdout_pipe, stdout_file=stdout_file,
                            conn=self.conn, pid_file=pid_file, mirror=self.mirror,
                            files=files)


class RemoteHelper(Helper):
    """A helper on another machine: stopped there first (its pid file), then its ssh
    here."""

    def __init__(self, *args, conn: Connection, pid_file: str, mirror: Mirror | None = None,
                 files: Sequence[str] = (), **kwargs):
        self.conn, self.remote_pid_file = conn, pid_file
        self.mirror, self.files = mirror, list(files)
        super().__init__(*args, **kwargs)

    def stop(self, grace: float = 3.0) -> int | None:
        if self.alive():
            try:
                self.conn.run(["sh", "-c", 'kill -TERM "$(cat "$1")" 2>/dev/null; '
                                           'rm -f -- "$1"', "sh", self.remote_pid_file],
                              timeout=15)
            except HostError:
                pass  # the part's teardown stops what runs in its hosts
            self.wait(grace)
        code = super().stop(grace)
        if self.mirror is not None:  # what it wrote as it ended
            self.mirror.sync(self.files)
        return code


#: what the reader of a part's answers queues for a line over :data:`ANSWER_MAX_CHARS`
_TOO_LONG = object()


class Part:
    """Another machine's part of the fabric: the ``part`` process there, held through
    one ssh session; requests and answers are JSON lines."""

    def __init__(self, conn: Connection, machine: int, log: Path):
        self.conn, self.machine, self.log = conn, machine, log
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.hosts: dict[str, int] = {}
        self.times: dict = {}
        self.lock = threading.Lock()  # one request at a time, its answer next

    def start(self, request: dict) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.conn.argv([*self.conn.python(), "-m", "testbed.cluster.remote", "part"]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                start_new_session=True, preexec_fn=dies_with_parent)
        threading.Thread(target=self._read, daemon=True).start()
        self._send(request)

    def _read(self) -> None:
        while line := self.proc.stdout.readline(ANSWER_MAX_CHARS):
            if not line.endswith("\n") and len(line) >= ANSWER_MAX_CHARS:
                self.lines.put(_TOO_LONG)
                return
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the answer (or its absence) says what happened

    def _answer(self, timeout: float, what: str) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise BringUpError(f"server {self.conn.server}: no answer to {what} in "
                               f"{timeout:g} s (see {self.log})") from None
        if line is None:
            raise BringUpError(f"server {self.conn.server}: its part ended (see {self.log})")
        if line is _TOO_LONG:
            self.refuse(f"its answer to {what} is over {ANSWER_MAX_CHARS} characters")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self.refuse(f"its answer to {what} is not a JSON object")
        if "error" in message:
            raise BringUpError(f"server {self.conn.server}: {message['error']} "
                               f"(see {self.log})")
        return message

    def wait_ready(self, timeout: float = PART_READY_S) -> None:
        ready = self._answer(timeout, "its part's bring-up").get("ready")
        if not isinstance(ready, dict) or not isinstance(ready.get("hosts"), dict):
            self.refuse("its bring-up answered no hosts")
        self.hosts, self.times = ready["hosts"], ready.get("times") or {}

    def ask(self, op: str, timeout: float = 60.0, **fields) -> dict:
        with self.lock:
            self._send({"op": op, **fields})
            answer = self._answer(timeout, op)
            if op not in answer:
                self.refuse(f"its answer to {op} is not one")
            return answer[op]

    def refuse(self, why: str) -> NoReturn:
        """End this part (its session: the part there tears itself down when its input
        ends) and raise :class:`ServerAnswerError` naming the server and ``why``."""
        self.end(why)
        raise ServerAnswerError(f"server {self.conn.server}: {why}; its part was ended "
                                f"(see {self.log})")

    def end(self, why: str) -> None:
        """End the part's session at once, ``why`` in its log."""
        try:
            with open(self.log, "a") as log:
                log.write(f"the lab's machine ended this part: {why}\n")
        except OSError:
            pass
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def stop(self) -> None:
        """Ask the part to tear down, and wait for it (then end the session)."""
        if self.proc is None:
            return
        self._send({"op": "stop"})
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(PART_STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class Mirror:
    """The files that helpers on a server name on their command lines, kept the same on
    this machine and there while they run (every machine has the run's results folder
    and run folder at the same paths; only files under ``roots`` are mirrored).

    A file goes from the machine that has it first to the other: what exists here when
    a helper starts (its configuration, the chain plan) is written there before it
    starts, and again when it changes here (a start signal written later); what a
    helper writes there (its records, a readiness file) comes back every
    :data:`INTERVAL_S`, by what was appended (or whole, when the file was written
    anew), and once more when the helper stops. Every workload that runs in a fabric
    host reads and writes its files this way, unchanged.

    The lab runs as root, so an answer is written here only when every file in it is one
    this machine asked for, still under the roots once resolved (no ``..``, no link on
    the way: each folder and the file itself are opened without following links), at
    an offset this machine already holds (or 0: the file written anew), with at most
    :data:`~testbed.cluster.remote.READ_MAX_BYTES` of strict base64 in all. Anything
    else writes nothing, ends the server's part and raises :class:`ServerAnswerError`
    naming the server.
    """

    INTERVAL_S = 0.2
    #: ``read`` answers one sync takes at most while they come full (the next sync, or
    #: the helper's stop, takes the rest)
    MAX_ROUNDS = 64

    def __init__(self, part: Part, roots: Sequence[str]):
        self.part, self.roots = part, tuple(r.rstrip("/") + "/" for r in roots)
        self.owner: dict[str, str | None] = {}  # "here", "there", or None: not yet made
        self.pushed: dict[str, tuple[int, int]] = {}  # size and mtime last written there
        self.pulled: dict[str, int] = {}  # bytes of it here
        self.refused: ServerAnswerError | None = None  # the answer that ended the part
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def _mirrored(self, arg: object) -> bool:
        """``arg`` names a file under the roots, written plainly (no ``..``, ``.`` or
        empty part: a path the mirror would resolve elsewhere is not mirrored)."""
        if not isinstance(arg, str) or "\0" in arg:
            return False
        root = next((r for r in self.roots if arg.startswith(r)), None)
        return root is not None and all(
            part not in ("", ".", "..") for part in arg[len(root):].split("/"))

    def watch(self, argv: Sequence[str]) -> list[str]:
        """Mirror the files ``argv`` names under the roots; returns them."""
        files = [a for a in argv if self._mirrored(a)]
        with self.lock:
            new = [f for f in files if f not in self.owner]
            if new:
                self.part.ask("prepare", dirs=sorted({str(Path(f).parent) for f in new}))
            for f in new:
                self.owner[f] = "here" if Path(f).exists() else None
        self.sync(files)
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return files

    def _run(self) -> None:
        while not self.stopping.wait(self.INTERVAL_S):
            try:
                self.sync()
            except BringUpError:  # the part ended (a refused answer: kept in .refused)
                return

    def sync(self, files: Sequence[str] | None = None) -> None:
        with self.lock:
            if self.refused is not None:
                raise ServerAnswerError(str(self.refused))
            chosen = list(self.owner) if files is None else [f for f in files
                                                              if f in self.owner]
            for f in chosen:
                if self.owner[f] in ("here", None):
                    self._push(f)
            for _ in range(self.MAX_ROUNDS):
                there = {f: self.pulled.get(f) for f in chosen
                         if self.owner[f] in ("there", None)}
                if not there:
                    return
                answer = self.part.ask("read", paths=there)
                try:
                    files_in = self._accept(answer, there)
                    for f, start, data in files_in:
                        self._write(f, start, data)
                except ServerAnswerError as exc:
                    self.refused = exc
                    raise
                if sum(len(data) for _, _, data in files_in) < READ_MAX_BYTES:
                    return  # nothing held back there

    def _refuse(self, why: str) -> NoReturn:
        """End the server's part; its :class:`ServerAnswerError`."""
        self.part.refuse(f"its mirror's read answer {why}; nothing of it was written")

    def _accept(self, answer: object, asked: dict[str, int | None]) -> list[
            tuple[str, int, bytes]]:
        """The files of a ``read`` answer, checked whole before one byte is written:
        ``(path, start, bytes)`` each."""
        if not isinstance(answer, dict):
            self._refuse("is not a mapping of files")
        out, total = [], 0
        for f, entry in answer.items():
            shown = repr(f)[:120]
            if f not in asked:
                self._refuse(f"names {shown}, which this machine did not ask for")
            if not (isinstance(entry, list) and len(entry) == 3
                    and all(type(v) is int for v in entry[:2])
                    and isinstance(entry[2], str)):
                self._refuse(f"for {shown} is not [size, start, base64 text]")
            size, start, text = entry
            held = asked[f] or 0
            if start not in (0, held):
                self._refuse(f"for {shown} starts at byte {start}; this machine holds "
                             f"{held} (it writes at {held}, or from 0 when the file was "
                             "written anew)")
            if len(text) > 4 * -(-READ_MAX_BYTES // 3):  # before decoding it
                self._refuse(f"carries over {READ_MAX_BYTES} bytes")
            try:
                data = base64.b64decode(text.encode("ascii"), validate=True)
            except (UnicodeEncodeError, binascii.Error):
                self._refuse(f"for {shown} is not base64")
            total += len(data)
            if total > READ_MAX_BYTES:
                self._refuse(f"carries over {READ_MAX_BYTES} bytes")
            if size != start + len(data):
                self._refuse(f"for {shown} says {size} bytes, not its start and data's "
                             f"{start + len(data)}")
            self._under_roots(f)
            out.append((f, start, data))
        return out

    def _under_roots(self, f: str) -> tuple[str, list[str]]:
        """The root ``f`` is under (resolved) and the names below it; refused when ``f``
        resolves (a link in it) out of that root."""
        root = next((r for r in self.roots if f.startswith(r)), None)
        if root is None or not self._mirrored(f):
            self._refuse(f"names {f!r:.120}, not a file under the run's folders")
        real_root = os.path.realpath(root)
        if os.path.commonpath([real_root, os.path.realpath(f)]) != real_root:
            self._refuse(f"names {f!r:.120}, which resolves out of the run's folders (a "
                         "link on its way)")
        return real_root, f[len(root):].split("/")

    def _write(self, f: str, start: int, data: bytes) -> None:
        """``data`` at ``start`` of ``f`` (cut there), every folder below its root made
        and entered without following a link, the file opened with O_NOFOLLOW."""
        real_root, names = self._under_roots(f)
        nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.makedirs(real_root, exist_ok=True)
            folder = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                for name in names[:-1]:
                    try:
                        os.mkdir(name, 0o755, dir_fd=folder)
                    except FileExistsError:
                        pass
                    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | nofollow,
                                    dir_fd=folder)
                    os.close(folder)
                    folder = inner
                out = os.open(names[-1], os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | nofollow
                              | (os.O_TRUNC if start == 0 else 0), 0o644, dir_fd=folder)
            finally:
                os.close(folder)
        except OSError as exc:
            self._refuse(f"names {f!r:.120}, which this machine cannot open as a plain "
                         f"file under the run's folders ({exc.strerror})")
        try:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                self._refuse(f"names {f!r:.120}, which is not a plain file here")
            os.lseek(out, start, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
            os.ftruncate(out, start + len(data))
        finally:
            os.close(out)
        self.owner[f] = "there"
        self.pulled[f] = start + len(data)

    def _push(self, f: str) -> None:
        """``f`` written there when it is a plain file here that changed (a link, a FIFO
        or a device is not read, nor sent)."""
        try:
            with open(f, "rb", opener=lambda path, flags: os.open(
                    path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)) as src:
                st = os.fstat(src.fileno())
                if not stat.S_ISREG(st.st_mode) or \
                        self.pushed.get(f) == (st.st_size, st.st_mtime_ns):
                    return
                data = src.read()
        except OSError:  # not there (yet), or a link
            return
        self.owner[f] = "here"
        self.part.ask("write", path=f, data=base64.b64encode(data).decode())
        self.pushed[f] = (st.st_size, st.st_mtime_ns)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(5)


class ClusterFabric(Fabric):
    """A :class:`Fabric` whose switches and hosts are placed over this machine (machine
    0, with the controller) and ``conns``' servers."""

    def __init__(self, spec: FabricSpec, caps, *, conns: Sequence[Connection],
                 place: placing.Placement, log_dir: Path, tunnel: str = "gretap",
                 qos: dict | None = None, **kwargs):
        run_id = kwargs["run_id"]
        servers = [c.server for c in conns]
        self.conns, self.place = list(conns), place
        addresses = machine_addresses(servers)
        ends = tunnels(spec, place, addresses, run_id, tunnel)
        super().__init__(spec, caps, here=place.on(0), tunnels=ends[0], log_dir=log_dir,
                         **kwargs)
        self._ends = ends
        #: the variant's qos section, as the parts rebuild their traffic classes from it
        self.qos_section = qos
        self.parts = [Part(conn, m + 1, log_dir / f"part-{conn.server.host}.log")
                      for m, conn in enumerate(self.conns)]
        self.run_folder = str(run_dir(self.run_id))
        self.mirrors: list[Mirror] = []

    def _request(self, part: Part, controller_port: int) -> dict:
        return {"run_id": self.run_id, "spec": self.spec.to_dict(),
                "here": self.place.on(part.machine),
                "tunnels": [asdict(t) for t in self._ends[part.machine]],
                "controller_port": controller_port, "red": self.red,
                "qos": self.qos_section, "switches": self.switch_settings.model_dump(),
                "own_folder": not part.conn.local}

    def start(self, await_paths: Callable[[], None] | None = None, *,
              check: bool = True) -> FabricTimes:
        roots = [self.run_folder] + ([str(self.log_dir)] if self.log_dir else [])
        # a part on this machine (a test's) shares its files: nothing to mirror (copying
        # a file onto itself while its helper appends would cut it short)
        self.mirrors = [Mirror(part, [] if part.conn.local else roots) for part in self.parts]
        for part in self.parts:  # they build while this machine builds its own part
            part.start(self._request(part, part.conn.forward(self.controller_port)))

        def parts_then_paths() -> None:
            for part in self.parts:
                part.wait_ready()
            if await_paths is not None:
                await_paths()

        return super().start(parts_then_paths, check=check)

    def _part_of(self, name: str) -> Part | None:
        machine = self.place.where.get(name, 0)
        return self.parts[machine - 1] if machine else None

    def host(self, name: str) -> Host:
        part = self._part_of(name)
        if part is None:
            return super().host(name)
        if name not in part.hosts:
            raise BringUpError(f"host {name} on server {part.conn.server} is not up")
        return RemoteHost(name, part.hosts[name], part.conn, self.run_folder,
                          self.mirrors[part.machine - 1])

    def host_pid(self, name: str) -> int:
        part = self._part_of(name)
        if part is not None:  # a pid there names nothing here
            raise BringUpError(f"host {name} runs on server {part.conn.server}: this "
                               "machine cannot enter it by its pid")
        return super().host_pid(name)

    def host_record(self, name: str) -> dict:
        part = self._part_of(name)
        if part is None:
            return super().host_record(name)
        return {"pid": part.hosts.get(name), "server": str(part.conn.server),
                "control": str(part.conn.control), "sudo": bool(part.conn.sudo)}

    def queue_stats(self) -> dict[str, dict[str, int]]:
        stats = super().queue_stats()
        for part in self.parts:
            stats.update(part.ask("queue_stats"))
        return stats

    def servers_watch(self) -> None:
        for part in self.parts:
            part.ask("watch")

    def servers_fidelity(self) -> list[dict]:
        return [fidelity_verdict.server_record(str(part.conn.server), part.ask("unwatch"))
                for part in self.parts]

    def grow(self, spec: FabricSpec):
        raise BringUpError("a lab over several machines does not grow (expand) yet")

    def stop(self) -> float:
        t0 = time.monotonic()
        for mirror in self.mirrors:
            mirror.stop()
        stoppers = [threading.Thread(target=part.stop) for part in self.parts]
        for t in stoppers:
            t.start()
        try:
            super().stop()
        finally:
            for t in stoppers:
                t.join()
        self.times.stop_s = time.monotonic() - t0
        return self.times.stop_s


def machine_addresses(servers: Sequence[Server]) -> Callable[[int, int], str]:
    """Machine m's address towards machine n: a server's own address; this machine's
    (0) is its source address on the route to the other."""
    own = [s.address() for s in servers]
    here = {n: source_address(own[n - 1]) for n in range(1, len(servers) + 1)}

    def address(m: int, n: int) -> str:
        return here[n] if m == 0 else own[m - 1]

    return address


def connect(servers: Sequence[Server], spec: FabricSpec, place: placing.Placement, *,
            run_id: str, folder: Path) -> tuple[list[Connection], str]:
    """A checked connection to every server and the tunnel kind every machine can make
    (HostError naming the first machine that fails; then every connection made is
    closed again)."""
    from testbed.cluster import remote

    conns: list[Connection] = []
    addresses = machine_addresses(servers)
    found = {}
    try:
        for m, server in enumerate(servers, start=1):
            conn = Connection(server, folder / f"ssh-{m}")
            conns.append(conn)
            conn.open()
            peers = sorted({addresses(n, m) for n in range(place.machines) if n != m})
            found[str(server)] = check(conn, run_id=run_id, peers=peers)
        here = remote.check(run_id, [addresses(m, 0) for m in range(1, place.machines)])
        if here["problems"]:
            raise HostError(f"this machine: {here['problems'][0]}")
        return conns, choose_tunnel(spec, here, found)
    except BaseException:
        for conn in conns:
            conn.close()
        raise


def choose_tunnel(spec: FabricSpec, here: dict, servers: dict[str, dict]) -> str:
    """The first tunnel kind of :data:`placement.TUNNELS` that every machine makes, once
    every route between them carries the fabric's frames in it; HostError otherwise.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", mtu=9000)
    >>> found = lambda kinds, mtu: {"tunnels": kinds, "routes": {"10.0.0.1": ["eth1", mtu]}}
    >>> choose_tunnel(spec, found(["gretap", "vxlan"], 9100), {"b": found(["vxlan"], 9100)})
    'vxlan'
    >>> choose_tunnel(spec, found(["gretap"], 9100), {"b": found(["gretap"], 1500)})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    testbed.errors.HostError: server b: the route to 10.0.0.1 leaves over eth1 with MTU 1500; ...
    """
    machines = {"this machine": here, **{f"server {s}": f for s, f in servers.items()}}
    kind = next((k for k in placing.TUNNELS
                 if all(k in f["tunnels"] for f in machines.values())), None)
    if kind is None:
        raise HostError("no tunnel kind that every machine makes: " + "; ".join(
            f"{name}: {', '.join(f['tunnels']) or 'none'}" for name, f in machines.items()))
    mtu = placing.underlay_mtu(spec, kind)
    for name, f in machines.items():
        for peer, (dev, have) in f["routes"].items():
            if have < mtu:
                raise HostError(f"{name}: the route to {peer} leaves over {dev} with MTU "
                                f"{have}; the fabric's frames in {kind} need {mtu} (raise "
                                f"{dev}'s MTU on every machine, or give the fabric a smaller "
                                "mtu)")
    return kind
