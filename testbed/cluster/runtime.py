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

The session with each server's part is :mod:`testbed.cluster.part`; the files that
helpers there name, mirrored, :mod:`testbed.cluster.mirror`.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.cluster import placement as placing
from testbed.cluster.mirror import Mirror
from testbed.cluster.part import Part
from testbed.cluster.servers import ROOT, Connection, Server, check, source_address
from testbed.core import fidelity_verdict
from testbed.errors import BringUpError, HostError
from testbed.fabric.net import Fabric, FabricTimes, Tunnel
from testbed.host.hosts import Host
from testbed.host.naming import run_dir
from testbed.host.procs import Helper
from topologies.spec import FabricSpec


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
