"""Entering a network namespace from one thread, for the sockets made there: a socket
keeps the namespace it was made in, so a netlink socket (or a pyroute2 ``IPRoute``) made
inside a host's namespace works on that host's links from anywhere in the process.

pyroute2's ``IPRoute(netns=...)`` forks a child to do this; forked from a process with
threads (the fidelity monitor beside the runner) the child can hang on a lock another
thread held, and the run with it. ``setns`` here moves the calling thread only.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
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


def packet_socket(path: str | os.PathLike | None, ifname: str, ethertype: int,
                  rcvbuf: int = 0) -> socket.socket:
    """A non-blocking packet socket for ``ethertype`` on interface ``ifname`` of the
    namespace at ``path`` (None: this thread's own); ``rcvbuf``: its receive buffer in
    bytes, forced past the system's limit (0: the default)."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype))
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        sock.bind((ifname, ethertype))
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
