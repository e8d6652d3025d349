"""Host-side multipath: which of a node's planes/rails can carry traffic right now.

A multi-homed node sees a dead plane or rail first as carrier loss on its NIC (the
switch port went away) and otherwise as connect failures or time-outs. This module
answers the first question cheaply (one ``SIOCGIFFLAGS`` ioctl, in the caller's own
network namespace: ``/sys/class/net`` would show the root namespace's view inside a
Mininet host) and orders the planes a hop should try.
"""

from __future__ import annotations

import fcntl
import socket
import struct

SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
IFF_RUNNING = 0x40  # operational state up: carrier present


def carrier(iface: str) -> bool:
    """True when ``iface`` is administratively up and has carrier; False if it is gone.

    >>> carrier("lo"), carrier("no-such-if0")
    (True, False)
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16sH14x", iface.encode()[:15],
                                                                    0))
        except OSError:
            return False
    flags = struct.unpack("16sH14x", raw)[1]
    return bool(flags & IFF_UP) and bool(flags & IFF_RUNNING)


def plane_order(preferred: int, planes: int) -> list[int]:
    """The planes to try: the preferred one, then the others in ring order.

    >>> plane_order(1, 3)
    [1, 2, 0]
    """
    return [(preferred + i) % planes for i in range(planes)]


def live_channels(ifaces: list[str]) -> list[int]:
    """Indices of the interfaces that have carrier (all of them if none has: sending
    on a dead channel fails visibly, which is better than not sending at all)."""
    alive = [k for k, name in enumerate(ifaces) if carrier(name)]
    return alive or list(range(len(ifaces)))
