"""Entering a network namespace from one thread, for the sockets made there: a socket
keeps the namespace it was made in, so a netlink socket (or a pyroute2 ``IPRoute``) made
inside a host's namespace works on that host's links from anywhere in the process.

pyroute2's ``IPRoute(netns=...)`` forks a child to do this; forked from a process with
threads (the fidelity monitor beside the runner) the child can hang on a lock another
thread held, and the run with it. ``setns`` here moves the calling thread only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_ATTACH_FILTER = 26
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
#: setsockopt(SOL_PACKET): hand the socket no frame its interface sends (Linux 4.20)
SOL_PACKET, PACKET_IGNORE_OUTGOING = 263, 23
#: classic BPF (linux/filter.h): opcodes, and the offset that loads the frame's packet
#: type (incoming, outgoing, ...) instead of its bytes
BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06
BPF_W, BPF_H, BPF_ABS, BPF_JEQ, BPF_K = 0x00, 0x08, 0x20, 0x10, 0x00
SKF_AD_PKTTYPE = (-0x1000 + 4) & 0xFFFFFFFF
#: getsockopt: the cookie of the socket's network namespace (Linux 5.14)
SO_NETNS_COOKIE = 71
T = TypeVar("T")


def setns(fd: int) -> None:
    """Move the calling thread (only it) into the network namespace open at ``fd``."""
    if hasattr(os, "setns"):  # Python 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def made_in(path: str | os.PathLike | None, make: Callable[[], T]) -> T:
    """``make()`` called inside the network namespace at ``path`` (``/run/netns/NAME``,
    ``/proc/PID/ns/net``; None: this thread's own), then back."""
    if path is None:
        return make()
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            setns(target)
            try:
                return make()
            finally:
                setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


def cookie(path: str | os.PathLike) -> int | None:
    """The cookie of the network namespace at ``path`` (a ``/proc/PID/ns/net``): a number
    the kernel never gives another namespace while it runs, where the namespace's inode
    number is given again once the namespace is freed. None when the namespace is gone
    or the kernel has no cookies (before Linux 5.14)."""
    def read() -> int:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8),
                                  "little")
    try:
        return made_in(path, read)
    except OSError:  # gone, or ENOPROTOOPT
        return None


def identity(path: str | os.PathLike) -> tuple[int, int, int | None] | None:
    """(device, inode, :func:`cookie`) of the network namespace at ``path``, or None when
    it is gone: what a run records of a namespace it made, to find it again later."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, cookie(path)


def of_pid(pid: int) -> str:
    """The namespace of process ``pid`` (a Mininet host's shell), as a path."""
    return f"/proc/{pid}/ns/net"


def ethertype_filter(ethertype: int) -> bytes:
    """A classic BPF program (``SO_ATTACH_FILTER``'s instructions) that keeps the frames
    of ``ethertype`` that arrive, and drops every other frame and every frame the
    interface sends.

    >>> len(ethertype_filter(0x88CC)) // 8  # instructions of 8 bytes each
    6
    """
    drop, keep = 0, 0x40000  # a filter returns how many bytes of the frame to keep
    return b"".join(struct.pack("HBBI", *insn) for insn in (
        (BPF_LD | BPF_W | BPF_ABS, 0, 0, SKF_AD_PKTTYPE),
        (BPF_JMP | BPF_JEQ | BPF_K, 3, 0, PACKET_OUTGOING),   # sent here: drop
        (BPF_LD | BPF_H | BPF_ABS, 0, 0, 12),                # the Ethernet type
        (BPF_JMP | BPF_JEQ | BPF_K, 0, 1, ethertype),
        (BPF_RET | BPF_K, 0, 0, keep),
        (BPF_RET | BPF_K, 0, 0, drop),
    ))


def packet_socket(path: str | os.PathLike | None, ifname: str, ethertype: int,
                  rcvbuf: int = 0) -> socket.socket:
    """A non-blocking packet socket for the frames of ``ethertype`` that arrive on
    interface ``ifname`` of the namespace at ``path`` (None: this thread's own);
    ``rcvbuf``: its receive buffer in bytes, forced past the system's limit (0: the
    default).

    The socket listens to every protocol (``ETH_P_ALL``) through a filter for
    ``ethertype`` (:func:`ethertype_filter`), as lldpd does: the kernel hands a frame to
    such a socket before a port's owner takes it, and to a socket of one protocol only
    after. A switch port of Open vSwitch's kernel datapath is such a port: its datapath
    takes every frame that arrives, and a socket bound to one protocol there hears
    nothing. The filter is set before the socket is bound, so no other frame gets in.

    Such a socket would also be handed a copy of every frame its interface sends, only for
    the filter to drop it; ``PACKET_IGNORE_OUTGOING`` (Linux 4.20) spares that copy, and
    the filter still drops them on a kernel without it."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # bound: hears nothing
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError as e:
            if e.errno != errno.ENOPROTOOPT:
                raise
        program = ctypes.create_string_buffer(ethertype_filter(ethertype))
        fprog = struct.pack("HL", len(program.raw) // 8, ctypes.addressof(program))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        sock.bind((ifname, ETH_P_ALL))
        sock.setblocking(False)
        return sock
    return made_in(path, make)


def udp_socket(path: str | os.PathLike | None, ifname: str, ip: str,
               port: int) -> socket.socket:
    """A non-blocking UDP socket bound to ``ip``:``port`` and to interface ``ifname`` of
    the namespace at ``path`` (a probe's sender or receiver: it leaves and arrives by
    that NIC only)."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        sock.bind((ip, port))
        sock.setblocking(False)
        return sock
    return made_in(path, make)
