"""The send buffer of ovs-vswitchd's shared packet socket, read from the host (read only).

With the userspace datapath, ovs-vswitchd sends every frame of every switch through one
AF_PACKET socket, created on its first send after it started. Every frame waiting in any
switch port's qdisc is charged to that socket, so its send buffer bounds the bytes that
all egress queues of all switches hold together; beyond it sends fail with EAGAIN
("error sending Ethernet packet ... Resource temporarily unavailable" in
ovs-vswitchd.log), drops that no queue counts. :mod:`testbed.fabric` raises
``wmem_default`` while a fabric comes up so the socket is created large, but if another
bridge sent first after ovs-vswitchd started, it keeps the host default (208 KB).
A run records the size it measured on.
"""

from __future__ import annotations

import re
import shutil
import subprocess

#: the unbound packet socket of ovs-vswitchd (the per-port receive sockets name a device)
_SEND_SOCKET = re.compile(r"^p_raw\s.*\s\[0\]:\*\s.*\"ovs-vswitchd\".*\btb(\d+)\b", re.M)


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
    match = _SEND_SOCKET.search(text)
    return int(match.group(1)) if match else None


def send_buffer_bytes() -> int | None:
    """The shared send socket's buffer now, or None if it cannot be read (no ``ss``,
    ovs-vswitchd has not sent yet)."""
    if shutil.which("ss") is None:
        return None
    done = subprocess.run(["ss", "-0", "-a", "-m", "-p"], capture_output=True, text=True,
                          timeout=10)
    return parse_ss(done.stdout) if done.returncode == 0 else None
