"""The host's packet sockets over netlink (packet_diag), against sockets of this test's
own: the interface each is bound to, its buffers and the process that holds it."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import time

import pytest

from testbed.host import netns, packet_sockets

pytestmark = pytest.mark.root


def test_a_bound_and_an_unbound_socket_are_found_with_their_owner():
    bound = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    unbound = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        bound.bind(("lo", 0))
        unbound.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 100_000)  # < wmem_max
        inodes = {os.fstat(s.fileno()).st_ino: s for s in (bound, unbound)}
        found = {s.inode: s for s in packet_sockets.dump() if s.inode in inodes}
        assert set(found) == set(inodes)
        b = found[os.fstat(bound.fileno()).st_ino]
        u = found[os.fstat(unbound.fileno()).st_ino]
        assert (b.protocol, packet_sockets.ifname(b.ifindex)) == (3, "lo")
        assert (u.protocol, u.ifindex) == (0, 0)
        # the kernel doubles what SO_SNDBUF asks for (the bookkeeping overhead), up to
        # twice net.core.wmem_max (Debian's 212,992: 300,000 became 425,984 there)
        assert u.sndbuf == unbound.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 200_000
        assert b.drops == 0
        owners = packet_sockets.socket_fds([os.getpid()])
        assert owners[u.inode] == (os.getpid(), unbound.fileno())
    finally:
        bound.close()
        unbound.close()


def test_a_packet_socket_hears_its_ethertype_arriving_and_nothing_else(tmp_path):
    """netns.packet_socket listens to every protocol through a filter (so that a port
    whose owner takes every frame, a switch port of the OVS kernel datapath, still hears
    LLDP): it must hear the frames of its ethertype that arrive, and neither another
    ethertype's nor the frames its own interface sends. On a veth pair in a namespace of
    the test's own."""
    ns = f"tbps{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "ea", "type", "veth", "peer", "name",
                        "eb"], check=True)
        for dev in ("ea", "eb"):
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        path = f"/run/netns/{ns}"
        listen = netns.packet_socket(path, "ea", 0x88CC)
        other_end = netns.packet_socket(path, "eb", 0x88CC)
        also_a = netns.packet_socket(path, "ea", 0x88B5)  # another socket of a's
        try:
            def frame(ethertype: int, tag: bytes) -> bytes:
                return bytes.fromhex("0180c200000e" "020000000001") \
                    + ethertype.to_bytes(2, "big") + tag.ljust(46, b"\0")
            also_a.send(frame(0x88CC, b"sent by a"))        # outgoing on a: not heard
            other_end.send(frame(0x88B5, b"other type"))    # arrives, another type
            other_end.send(frame(0x88CC, b"lldp from b"))   # arrives: heard
            heard = []
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                if select.select([listen], [], [], 0.2)[0]:
                    heard.append(listen.recv(2048))
                elif heard:
                    break
            assert [h[14:14 + len(b"lldp from b")] for h in heard] == [b"lldp from b"], heard
        finally:
            for sock in (listen, other_end, also_a):
                sock.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_a_packet_socket_is_not_handed_the_frames_its_interface_sends():
    """The kernel skips the socket for every frame its interface sends (so a socket held
    open for a whole run costs no copy of each frame sent), where the kernel offers it."""
    sock = netns.packet_socket(None, "lo", 0x88CC)
    try:
        value = sock.getsockopt(netns.SOL_PACKET, netns.PACKET_IGNORE_OUTGOING)
    except OSError as e:
        pytest.skip(f"this kernel has no PACKET_IGNORE_OUTGOING ({e}); the filter drops them")
    finally:
        sock.close()
    assert value == 1
