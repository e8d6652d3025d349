"""The send buffer of ovs-vswitchd's shared packet socket, read from the host (read only).

With the userspace datapath, ovs-vswitchd sends every frame of every switch through one
AF_PACKET socket, created on its first send after it started. Every frame waiting in any
switch port's qdisc is charged to that socket, so its send buffer bounds the bytes that
all egress queues of all switches hold together; beyond it sends fail with EAGAIN
("error sending Ethernet packet ... Resource temporarily unavailable" in
ovs-vswitchd.log), drops that no queue counts. :mod:`testbed.fabric.net` raises
``wmem_default`` while a fabric comes up so the socket is created large, but if another
bridge sent first after ovs-vswitchd started, it keeps the host default (208 KB).
:func:`enlarge` then raises it in place: it takes a duplicate of ovs-vswitchd's socket
descriptor (``pidfd_getfd``, root) and sets ``SO_SNDBUFFORCE`` on it, which acts on the
socket itself. A run records the size it measured on.
"""

from __future__ import annotations

import ctypes
import os
import socket

from testbed.host import packet_sockets

SYS_PIDFD_GETFD = 438  # the same number on every architecture Linux has
SO_SNDBUFFORCE = 32


def send_sockets() -> dict[int, tuple[int, int]]:
    """Every ovs-vswitchd's shared send socket now (its one packet socket bound to no
    interface, of protocol 0: it receives nothing): pid -> (fd, send buffer); empty when
    none has one (a process that has not sent yet)."""
    return {pid: (fd, s.sndbuf) for s, pid, fd in packet_sockets.held_by("ovs-vswitchd")
            if s.ifindex == 0 and s.protocol == 0}


def send_buffer_bytes(pids: list[int] | None = None) -> int | None:
    """The smallest send buffer of the processes ``pids`` (None: any ovs-vswitchd) now,
    or None if none can be read."""
    found = send_sockets()
    sizes = [size for pid, (_, size) in found.items() if pids is None or pid in pids]
    return min(sizes, default=None)


def enlarge(size: int, pids: list[int] | None = None) -> str | None:
    """Raise the send socket buffer of each of ``pids`` (None: every ovs-vswitchd) to
    ``size`` bytes where it is smaller; None when all are that large now, else why not
    (the caller warns and records the size)."""
    found = send_sockets()
    targets = {p: v for p, v in found.items() if pids is None or p in pids}
    if not targets:
        return "ovs-vswitchd's send socket not found (it has not sent yet)"
    problems = []
    for pid, (fd, now) in sorted(targets.items()):
        if now < size:
            problem = set_size(pid, fd, size)
            if problem:
                problems.append(problem)
    after = send_buffer_bytes(list(targets))
    if problems:
        return problems[0]
    return None if after is not None and after >= size else \
        f"still {after} bytes after SO_SNDBUFFORCE"
def set_size(pid: int, fd: int, size: int) -> str | None:
    """Set the send buffer of socket ``fd`` of process ``pid`` to ``size`` bytes (through a
    duplicate of the descriptor); None, or why it failed."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        return f"pidfd_open({pid}): {exc.strerror}"
    try:
        dup = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            return f"pidfd_getfd(fd {fd} of {pid}): {os.strerror(ctypes.get_errno())}"
        sock = socket.socket(fileno=dup)
        try:  # the kernel doubles the value, as for SO_SNDBUF
            sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, size // 2)
        except OSError as exc:
            return f"SO_SNDBUFFORCE: {exc.strerror}"
        finally:
            sock.detach()
            os.close(dup)
    finally:
        os.close(pidfd)
    return None
