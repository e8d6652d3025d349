"""Packet sockets (AF_PACKET) of the host's own namespace over netlink (sock_diag's
packet_diag, what ``ss -0 -m`` reads), with the processes that hold them.

The userspace datapath's ovs-vswitchd reads each port through a packet socket bound to
it and sends every frame through one unbound socket: their buffer sizes and drop counts
are what :mod:`testbed.fabric.ovs_socket` raises and :mod:`testbed.fabric.drops` counts.
The kernel answers one dump request with every packet socket's protocol, interface,
inode and memory counters; the owner of an inode is found the way ``ss -p`` finds it,
among the ``socket:[INODE]`` links of the processes' ``/proc/PID/fd``.

>>> msg = message(inode=77, protocol=0, ifindex=0, meminfo=(0, 8, 0, 212992) + (0,) * 4 + (5,))
>>> parse(msg)
[PacketSocket(inode=77, protocol=0, ifindex=0, rcvbuf=8, sndbuf=212992, drops=5)]
>>> parse(b"")
[]
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST_DUMP = 0x301
NLMSG_ERROR, NLMSG_DONE = 2, 3
PACKET_SHOW_INFO, PACKET_SHOW_MEMINFO = 0x1, 0x10
PACKET_DIAG_INFO, PACKET_DIAG_MEMINFO = 0, 6
SK_MEMINFO_RCVBUF, SK_MEMINFO_SNDBUF, SK_MEMINFO_DROPS = 1, 3, 8

_NLMSG = struct.Struct("=IHHII")
_REQUEST = struct.Struct("=BBHIIII")  # family, protocol, pad, inode, show, cookie[2]
_MESSAGE = struct.Struct("=BBHIII")  # family, type, protocol, inode, cookie[2]
_ATTR = struct.Struct("=HH")
_INFO = struct.Struct("=IIIIII")  # ifindex, version, reserve, copy_thresh, tstamp, flags


@dataclass(frozen=True)
class PacketSocket:
    """One packet socket: its protocol (host order; 0 receives nothing, 3 is every
    protocol), the interface it is bound to (0: none) and its buffers and drops."""

    inode: int
    protocol: int
    ifindex: int
    rcvbuf: int
    sndbuf: int
    drops: int


def _align(n: int) -> int:
    return (n + 3) & ~3


def parse(data: bytes) -> list[PacketSocket]:
    """The packet sockets of one part of a dump's answer (NLMSG_DONE ends it)."""
    out, off = [], 0
    while off + _NLMSG.size <= len(data):
        length, kind = _NLMSG.unpack_from(data, off)[:2]
        if length < _NLMSG.size or kind == NLMSG_DONE:
            break
        if kind == NLMSG_ERROR:
            code = -struct.unpack_from("=i", data, off + _NLMSG.size)[0]
            raise OSError(code, f"packet_diag: {os.strerror(code)}")
        body = off + _NLMSG.size
        _, _, protocol, inode = _MESSAGE.unpack_from(data, body)[:4]
        ifindex, mem = 0, ()
        at = body + _MESSAGE.size
        while at + _ATTR.size <= off + length:
            alen, atype = _ATTR.unpack_from(data, at)
            if alen < _ATTR.size:
                break
            if atype == PACKET_DIAG_INFO:
                ifindex = _INFO.unpack_from(data, at + _ATTR.size)[0]
            elif atype == PACKET_DIAG_MEMINFO:
                mem = struct.unpack_from(f"={(alen - _ATTR.size) // 4}I", data, at + _ATTR.size)
            at += _align(alen)
        if len(mem) > SK_MEMINFO_DROPS:
            out.append(PacketSocket(inode, protocol, ifindex, mem[SK_MEMINFO_RCVBUF],
                                    mem[SK_MEMINFO_SNDBUF], mem[SK_MEMINFO_DROPS]))
        off += _align(length)
    return out


def message(*, inode: int, protocol: int, ifindex: int, meminfo: tuple[int, ...]) -> bytes:
    """One packet_diag answer as the kernel writes it (for tests)."""
    info = _ATTR.pack(_ATTR.size + _INFO.size, PACKET_DIAG_INFO) + _INFO.pack(ifindex, 0, 0,
                                                                             0, 0, 0)
    mem = struct.pack(f"={len(meminfo)}I", *meminfo)
    attrs = info + _ATTR.pack(_ATTR.size + len(mem), PACKET_DIAG_MEMINFO) + mem
    body = _MESSAGE.pack(socket.AF_PACKET, socket.SOCK_RAW, protocol, inode, 0, 0) + attrs
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, 2, 1, 0) + body


def dump() -> list[PacketSocket]:
    """Every packet socket of this thread's network namespace now."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as sock:
        request = _REQUEST.pack(socket.AF_PACKET, 0, 0, 0,
                                PACKET_SHOW_INFO | PACKET_SHOW_MEMINFO, 0, 0)
        sock.send(_NLMSG.pack(_NLMSG.size + len(request), SOCK_DIAG_BY_FAMILY,
                              NLM_F_REQUEST_DUMP, 1, 0) + request)
        out: list[PacketSocket] = []
        while True:
            data = sock.recv(1 << 16)
            out += parse(data)
            if not data or _done(data):
                return out


def _done(data: bytes) -> bool:
    off = 0
    while off + _NLMSG.size <= len(data):
        length, kind = _NLMSG.unpack_from(data, off)[:2]
        if kind in (NLMSG_DONE, NLMSG_ERROR) or length < _NLMSG.size:
            return True
        off += _align(length)
    return False


def pids_named(comm: str, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose command name is ``comm``."""
    out = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == comm:
                    out.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
    return sorted(out)


def socket_fds(pids: Iterable[int], proc: Path = Path("/proc")) -> dict[int, tuple[int, int]]:
    """inode -> (pid, fd) of every socket the processes ``pids`` hold."""
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        folder = proc / str(pid) / "fd"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(folder / fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.setdefault(int(target[8:-1]), (pid, int(fd)))
    return out


def held_by(comm: str, pids: Iterable[int] | None = None
            ) -> list[tuple[PacketSocket, int, int]]:
    """(socket, pid, fd) of every packet socket held by a process named ``comm`` (of
    ``pids``; None: any)."""
    named = pids_named(comm)
    only = None if pids is None else set(pids)
    owners = socket_fds([p for p in named if only is None or p in only])
    return [(s, *owners[s.inode]) for s in dump() if s.inode in owners]


def ifname(index: int) -> str | None:
    """The name of interface ``index`` of this namespace, None when it is gone."""
    try:
        return socket.if_indextoname(index)
    except OSError:
        return None
