"""The send buffer of ovs-vswitchd's shared packet socket, read from the host (read only).

With the userspace datapath, ovs-vswitchd sends every frame of every switch through one
AF_PACKET socket, created on its first send after it started. Every frame waiting in any
switch port's qdisc is charged to that socket, so its send buffer bounds the bytes that
all egress queues of all switches hold together; beyond it sends fail with EAGAIN
("error sending Ethernet packet ... Resource temporarily unavailable" in
ovs-vswitchd.log), drops that no queue counts. :mod:`testbed.fabric` raises
``wmem_default`` while a fabric comes up so the socket is created large, but if another
bridge sent first after ovs-vswitchd started, it keeps the host default (208 KB).
:func:`enlarge` then raises it in place: it takes a duplicate of ovs-vswitchd's socket
descriptor (``pidfd_getfd``, root) and sets ``SO_SNDBUFFORCE`` on it, which acts on the
socket itself. A run records the size it measured on.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import socket
import subprocess

#: the unbound packet socket of ovs-vswitchd (the per-port receive sockets name a device)
_SEND_SOCKET = re.compile(
    r"^p_raw\s.*\s\[0\]:\*\s.*\"ovs-vswitchd\",pid=(\d+),fd=(\d+).*\btb(\d+)\b", re.M)
SYS_PIDFD_GETFD = 438  # the same number on every architecture Linux has
SO_SNDBUFFORCE = 32


def parse_ss(text: str) -> int | None:
    """The send buffer (bytes) of ovs-vswitchd's unbound packet socket in ``ss -0amp``.

    >>> parse_ss('p_raw UNCONN 0 0 [0]:* * users:(("ovs-vswitchd",pid=7,fd=45)) '
    ...          'skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)\\n'
    ...          'p_raw UNCONN 0 0 *:tb1a2bp0l0e1 * users:(("ovs-vswitchd",pid=7,fd=40)) '
    ...          'skmem:(r0,rb8388608,t0,tb212992,f0,w0,o176,bl0,d0)')
    212992
    >>> parse_ss("") is None
    True
    """
    found = _find(text)
    return found[2] if found else None


def _find(text: str) -> tuple[int, int, int] | None:
    """(pid, fd, send buffer) of ovs-vswitchd's unbound packet socket in ``ss -0amp``."""
    match = _SEND_SOCKET.search(text)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def _ss() -> str | None:
    if shutil.which("ss") is None:
        return None
    done = subprocess.run(["ss", "-0", "-a", "-m", "-p"], capture_output=True, text=True,
                          timeout=10)
    return done.stdout if done.returncode == 0 else None


def _socket() -> tuple[int, int, int] | None:
    """(pid, fd, send buffer) of ovs-vswitchd's shared send socket now, or None (no
    ``ss``, or ovs-vswitchd has not sent yet)."""
    text = _ss()
    return _find(text) if text is not None else None


def send_buffer_bytes() -> int | None:
    """The shared send socket's buffer now, or None if it cannot be read."""
    found = _socket()
    return found[2] if found else None


def locate() -> tuple[int, int] | None:
    """(pid, fd) of ovs-vswitchd's shared send socket, or None."""
    found = _socket()
    return found[:2] if found else None


def enlarge(size: int) -> str | None:
    """Raise the shared send socket's buffer to ``size`` bytes if it is smaller; None when
    it is that large now, else why not (the caller warns and records the size)."""
    found = _socket()
    if found is None:
        return "ovs-vswitchd's send socket not found (no ss, or it has not sent yet)"
    pid, fd, now = found
    if now >= size:
        return None
    problem = set_size(pid, fd, size)
    after = send_buffer_bytes()
    return problem or (None if after is not None and after >= size
                       else f"still {after} bytes after SO_SNDBUFFORCE")


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
