"""Packet captures of named ports: tcpdump in the namespace that holds the port.

A fabric port is named as in the spec without the run prefix: a switch port
(``p0l0e3``, in the host's own namespace, where Open vSwitch's ports live) or a host
interface (``n0p0r0``, inside that host's namespace). Scenario captures
(``capture: [p0l0e3, n0p0r0]``) run for the whole variant with a short snap length
(headers only: Ethernet, IP, UDP and the RoCEv2 BTH fit in 128 bytes), into
``capture-PORT.pcap`` of the variant's folder.

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", planes=1, nodes=4, leaves_per_plane=2,
...                     spines_per_plane=2)
>>> port_of(spec, "n0p0r0")
Port(name='n0p0r0', ifname='tbdoc0n0p0r0', host='tbdoc0n0')
>>> port_of(spec, "p0l0e3")
Port(name='p0l0e3', ifname='tbdoc0p0l0e3', host=None)
>>> parse_ports(["n9p0r0"], spec)
Traceback (most recent call last):
...
testbed.errors.ConfigError: capture[0]: no port 'n9p0r0' in this fabric (e.g. 'n0p0r0', 'p0l0e1')
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError, HostError
from testbed.host.hosts import Host, RootHost
from testbed.host.procs import Helper, wait_for
from topologies.spec import FabricSpec

#: snap length of scenario captures: every header of a RoCEv2 frame, a little payload
SCENARIO_SNAPLEN = 128


@dataclass(frozen=True)
class Port:
    """A port to capture on: its short name, interface, and the host holding it (None:
    the root namespace, where the switch ports are)."""

    name: str
    ifname: str
    host: str | None


def _short(spec: FabricSpec, name: str) -> str:
    return name[len(spec.prefix):] if name.startswith(spec.prefix) else name


def ports(spec: FabricSpec) -> dict[str, Port]:
    """Every capturable port of ``spec`` by short name: host interfaces, switch ports."""
    out: dict[str, Port] = {}
    for lk in spec.links:
        if lk.kind == "host":
            out[_short(spec, lk.a_intf)] = Port(_short(spec, lk.a_intf), lk.a_intf, lk.a)
        else:
            out[_short(spec, lk.a_intf)] = Port(_short(spec, lk.a_intf), lk.a_intf, None)
        out[_short(spec, lk.b_intf)] = Port(_short(spec, lk.b_intf), lk.b_intf, None)
    return out


def port_of(spec: FabricSpec, name: str, where: str = "PORT") -> Port:
    """The port ``name`` (short or full); ConfigError naming ``where`` otherwise."""
    known = ports(spec)
    port = known.get(_short(spec, str(name)))
    if port is None:
        host_if = next(iter(p for p in known.values() if p.host), None)
        switch_if = next(iter(p for p in known.values() if p.host is None), None)
        examples = ", ".join(repr(p.name) for p in (host_if, switch_if) if p)
        raise ConfigError(where, f"no port {name!r} in this fabric (e.g. {examples})")
    return port


def parse_ports(raw: Any, spec: FabricSpec, where: str = "capture") -> tuple[str, ...]:
    """A scenario's ``capture:`` list, checked against ``spec``: short port names."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(where, "must be a list of port names (e.g. [p0l0e3, n0p0r0])")
    names = []
    for i, name in enumerate(raw):
        if not isinstance(name, str):
            raise ConfigError(f"{where}[{i}]", f"must be a port name, got {name!r}")
        names.append(port_of(spec, name, f"{where}[{i}]").name)
    if len(set(names)) != len(names):
        raise ConfigError(where, f"ports repeat: {names}")
    return tuple(names)


def tcpdump_argv(ifname: str, pcap: Path, snaplen: int = 0, count: int | None = None
                 ) -> list[str]:
    """tcpdump writing ``ifname``'s frames to ``pcap`` (as root: the results folder is
    root's), unbuffered so that a stopped capture is complete.

    >>> tcpdump_argv("tb1a2bp0l0e3", Path("/r/c.pcap"), 128)
    ['tcpdump', '-i', 'tb1a2bp0l0e3', '-n', '-s', '128', '-U', '-Z', 'root', '-w', '/r/c.pcap']
    """
    argv = ["tcpdump", "-i", ifname, "-n", "-s", str(snaplen), "-U", "-Z", "root",
            "-w", str(pcap)]
    if count:
        argv[1:1] = ["-c", str(count)]
    return argv


def start(host: Host, ifname: str, pcap: Path, *, pid_dir: Path, name: str,
          snaplen: int = 0, count: int | None = None) -> Helper:
    """Start tcpdump on ``ifname`` inside ``host``; returns once it listens."""
    if shutil.which("tcpdump") is None:
        raise HostError("tcpdump is not installed (apt-get install tcpdump)")
    pcap.parent.mkdir(parents=True, exist_ok=True)
    log = pcap.with_suffix(".log")
    helper = host.spawn(name, tcpdump_argv(ifname, pcap, snaplen, count), pid_dir=pid_dir,
                        log=log)
    if not wait_for(lambda: "listening on" in _read(log) or not helper.alive(), 10):
        helper.stop()
        raise HostError(f"tcpdump on {ifname} did not start (see {log})")
    if not helper.alive():
        helper.stop()
        raise HostError(f"tcpdump on {ifname}: {_read(log).strip()[-300:]}")
    return helper


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def start_all(fabric, names: Sequence[str], *, out: Path, pid_dir: Path,
              stack: ExitStack, snaplen: int = SCENARIO_SNAPLEN) -> list[Path]:
    """A scenario's captures: one tcpdump per port until the stack unwinds (stopped
    before the fabric goes, so that every pcap is complete)."""
    pcaps = []
    for name in names:
        port = port_of(fabric.spec, name)
        host = fabric.host(port.host) if port.host else RootHost()
        pcap = out / f"capture-{port.name}.pcap"
        helper = start(host, port.ifname, pcap, pid_dir=pid_dir, name=f"capture-{port.name}",
                       snaplen=snaplen)
        stack.callback(helper.stop)
        pcaps.append(pcap)
    return pcaps
