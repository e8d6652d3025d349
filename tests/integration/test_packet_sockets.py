"""The host's packet sockets over netlink (packet_diag), against sockets of this test's
own: the interface each is bound to, its buffers and the process that holds it."""

from __future__ import annotations

import os
import socket

import pytest

from testbed.host import packet_sockets

pytestmark = pytest.mark.root


def test_a_bound_and_an_unbound_socket_are_found_with_their_owner():
    bound = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    unbound = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        bound.bind(("lo", 0))
        unbound.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 300_000)
        inodes = {os.fstat(s.fileno()).st_ino: s for s in (bound, unbound)}
        found = {s.inode: s for s in packet_sockets.dump() if s.inode in inodes}
        assert set(found) == set(inodes)
        b = found[os.fstat(bound.fileno()).st_ino]
        u = found[os.fstat(unbound.fileno()).st_ino]
        assert (b.protocol, packet_sockets.ifname(b.ifindex)) == (3, "lo")
        assert (u.protocol, u.ifindex) == (0, 0)
        # the kernel doubles what SO_SNDBUF asks for (the bookkeeping overhead)
        assert u.sndbuf == unbound.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 600_000
        assert b.drops == 0
        owners = packet_sockets.socket_fds([os.getpid()])
        assert owners[u.inode] == (os.getpid(), unbound.fileno())
    finally:
        bound.close()
        unbound.close()
