"""The lab's raw netlink: the few messages read or sent too often for pyroute2.

pyroute2 (``IPRoute``) configures links, addresses and queues; it parses every attribute
of every message, which costs milliseconds. Three things run many times a second, and
read or write only a few fields, so they speak netlink here, by hand:

- queue counters: one dump of every qdisc of a namespace, read for backlog, drops and
  what was sent (:class:`QueueReader`; the controller's telemetry, the fidelity monitor,
  the PFC agent, the fabric's settle check);
- a token bucket changed in place (:func:`tbf_change`: the PFC agent pauses a class);
- link state changes, as they happen (:func:`link_watch`, :func:`link_events`: the
  MACsec forwarder follows its wire's carrier);
- every interface's counters and carrier, one dump a sample (:class:`LinkReader`: the
  lab monitor's port rates and link states).

Every socket is made in this thread's namespace or, given a path, in another one
(:func:`route_socket`), and keeps it.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from testbed.host import netns

RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
RTMGRP_LINK = 1
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLA_F_NESTED = 0x8000
TC_H_ROOT = 0xFFFFFFFF
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
TCA_TBF_PARMS, TCA_TBF_BURST = 1, 6
TC_LINKLAYER_ETHERNET = 1
IFF_UP, IFF_RUNNING = 0x1, 0x40
IFLA_IFNAME, IFLA_STATS64 = 3, 23

NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
IFINFO = struct.Struct("=BxHiII")  # family, type, ifindex, flags, change
RTATTR = struct.Struct("=HH")  # length, type
GNET_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
GNET_BASIC = struct.Struct("=QI")  # bytes, packets
#: the first eight fields of struct rtnl_link_stats64
LINK_STATS64 = struct.Struct("=8Q")  # rx/tx packets, rx/tx bytes, rx/tx errors, rx/tx dropped
#: struct tc_tbf_qopt: rate and peak rate (tc_ratespec), limit, buffer, mtu
TBF_QOPT = struct.Struct("=BBhhHI BBhhHI III")


def route_socket(path: str | os.PathLike | None = None, *, kind: int = socket.SOCK_RAW,
                 bind: bool = True) -> socket.socket:
    """A NETLINK_ROUTE socket made in the network namespace at ``path``
    (``/run/netns/NAME``, ``/proc/PID/ns/net``; None: this thread's), bound unless
    ``bind`` is false (pyroute2 binds a socket it is given itself)."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, kind, socket.NETLINK_ROUTE)
        if bind:
            sock.bind((0, 0))
        return sock
    return netns.made_in(path, make)


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to four bytes."""
    return RTATTR.pack(RTATTR.size + len(payload), kind) + payload + bytes(-len(payload) % 4)


def attrs(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, payload start, payload end) of the netlink attributes in data[start:end]."""
    while start + RTATTR.size <= end:
        length, kind = RTATTR.unpack_from(data, start)
        if length < RTATTR.size:
            return
        yield kind & 0x3FFF, start + RTATTR.size, start + length
        start += (length + 3) & ~3


def messages(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(type, body start, end) of every netlink message in one datagram."""
    offset = 0
    while offset + NLMSG.size <= len(data):
        length, kind = NLMSG.unpack_from(data, offset)[:2]
        if length < NLMSG.size:
            return
        yield kind, offset + NLMSG.size, offset + length
        offset = (offset + length + 3) & ~3


def dump_part(data: bytes, what: str) -> tuple[list[tuple[int, int, int]], bool]:
    """The messages of one datagram of a dump (type, body start, end), and whether the
    dump ended in it (NLMSG_DONE); an error message raises OSError naming ``what``."""
    found, done = [], False
    for kind, body, end in messages(data):
        if kind == NLMSG_DONE:
            done = True
        elif kind == NLMSG_ERROR:
            raise OSError(f"netlink error in {what} dump")
        else:
            found.append((kind, body, end))
    return found, done


# -- queue counters -------------------------------------------------------------------------
@dataclass(frozen=True)
class Queue:
    """A qdisc's counters: what it holds and dropped, and what it sent."""

    backlog_bytes: int
    drops: int
    sent_bytes: int = 0
    sent_packets: int = 0
    backlog_packets: int = 0


def parse_qdisc_dump(data: bytes, leaves: bool = False) -> tuple[dict, bool]:
    """Root-qdisc counters by interface index from RTM_NEWQDISC messages (backlog, drops,
    bytes and packets sent); and whether the dump is complete (NLMSG_DONE seen).

    ``leaves``: every other qdisc's counters instead, by (interface index, major of
    its handle), e.g. the leaf queues of traffic classes.

    >>> stats = attr(TCA_STATS_QUEUE, GNET_QUEUE.pack(2, 3000, 1, 0, 0))
    >>> body = TCMSG.pack(0, 5, 0x10000, TC_H_ROOT, 0) + attr(TCA_STATS2, stats)
    >>> msg = NLMSG.pack(NLMSG.size + len(body), RTM_NEWQDISC, 0, 0, 0) + body
    >>> parse_qdisc_dump(msg + NLMSG.pack(NLMSG.size, NLMSG_DONE, 0, 0, 0))
    ({5: Queue(backlog_bytes=3000, drops=1, sent_bytes=0, sent_packets=0, backlog_packets=2)}, True)
    """
    out: dict = {}
    found, done = dump_part(data, "qdisc")
    for kind, body, end in found:
        if kind == RTM_NEWQDISC:
            _, index, handle, parent, _ = TCMSG.unpack_from(data, body)
            if (parent != TC_H_ROOT) != leaves:
                continue
            for kind2, a, b in attrs(data, body + TCMSG.size, end):
                if kind2 != TCA_STATS2:
                    continue
                sent, packets, queue = 0, 0, None
                for kind3, c, d in attrs(data, a, b):
                    if kind3 == TCA_STATS_QUEUE:
                        queue = GNET_QUEUE.unpack_from(data, c)
                    elif kind3 == TCA_STATS_BASIC and d - c >= GNET_BASIC.size:
                        sent, packets = GNET_BASIC.unpack_from(data, c)
                if queue is not None:
                    key = (index, handle >> 16) if leaves else index
                    out[key] = Queue(backlog_bytes=queue[1], drops=queue[2],
                                     sent_bytes=sent, sent_packets=packets,
                                     backlog_packets=queue[0])
    return out, done


class QueueReader:
    """Root-qdisc counters of the given interfaces, one netlink dump per call.

    The dump is parsed here, reading only the counters: pyroute2 parses every attribute
    of every qdisc on the host, about 30 ms for a hundred qdiscs, which at 10 samples a
    second is a third of a core (and on a 128-switch fabric, 2,600 qdiscs, most of a
    second per dump). Interface indexes are looked up by name (one ioctl each), again
    only for names not yet found (ports appear while the fabric comes up).

    ``sock``: a netlink route socket to dump through (e.g. one made in another network
    namespace, :func:`route_socket`); by default one in this thread's namespace.
    """

    def __init__(self, ifnames: list[str] | tuple[str, ...] = (),
                 sock: socket.socket | None = None):
        self._wanted = set(ifnames)
        self._names: dict[int, str] = {}
        self._sock = sock if sock is not None else route_socket()
        self._sock.settimeout(2.0)
        self._seq = 0

    def _resolve(self) -> None:
        missing = self._wanted - set(self._names.values())
        for name in missing:
            try:
                self._names[socket.if_nametoindex(name)] = name
            except OSError:  # not created yet
                continue

    def dump(self, leaves: bool = False) -> dict:
        """Counters of every root qdisc in the socket's namespace, by interface index
        (``leaves``: of every other qdisc, by interface index and handle major)."""
        self._seq += 1
        request = NLMSG.pack(NLMSG.size + TCMSG.size, RTM_GETQDISC,
                             NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0)
        self._sock.send(request + TCMSG.pack(0, 0, 0, 0, 0))
        out: dict = {}
        while True:
            part, done = parse_qdisc_dump(self._sock.recv(1 << 20), leaves)
            out.update(part)
            if done:
                return out

    def read(self) -> dict[str, Queue]:
        """Counters of the wanted interfaces that exist, by name."""
        self._resolve()
        return {self._names[i]: q for i, q in self.dump().items() if i in self._names}

    def read_leaves(self) -> dict[tuple[str, int], Queue]:
        """Counters of the wanted interfaces' non-root qdiscs, by (name, handle major)."""
        self._resolve()
        return {(self._names[i], major): q for (i, major), q in self.dump(True).items()
                if i in self._names}

    def close(self) -> None:
        self._sock.close()


# -- interface counters and carrier ---------------------------------------------------------
@dataclass(frozen=True)
class LinkCounters:
    """An interface's counters (rtnl_link_stats64) and state: ``running`` is up with
    carrier, which a cut of either end of a veth clears."""

    rx_packets: int
    tx_packets: int
    rx_bytes: int
    tx_bytes: int
    rx_errors: int
    tx_errors: int
    rx_dropped: int
    tx_dropped: int
    running: bool


def parse_link_dump(data: bytes) -> tuple[dict[str, LinkCounters], bool]:
    """Counters and state by interface name from RTM_NEWLINK messages; and whether the
    dump is complete (NLMSG_DONE seen).

    >>> stats = LINK_STATS64.pack(1, 2, 100, 200, 0, 0, 0, 3)
    >>> body = IFINFO.pack(0, 1, 9, IFF_UP | IFF_RUNNING, 0)
    >>> body += attr(IFLA_IFNAME, b"sw1e1" + bytes(1))
    >>> body += attr(IFLA_STATS64, stats + bytes(8 * 16))
    >>> msg = NLMSG.pack(NLMSG.size + len(body), RTM_NEWLINK, 0, 0, 0) + body
    >>> links, done = parse_link_dump(msg + NLMSG.pack(NLMSG.size, NLMSG_DONE, 0, 0, 0))
    >>> links["sw1e1"].tx_bytes, links["sw1e1"].tx_dropped, links["sw1e1"].running, done
    (200, 3, True, True)
    """
    out: dict[str, LinkCounters] = {}
    found, done = dump_part(data, "link")
    for kind, body, end in found:
        if kind == RTM_NEWLINK and end - body >= IFINFO.size:
            flags = IFINFO.unpack_from(data, body)[3]
            name, stats = None, None
            for kind2, a, b in attrs(data, body + IFINFO.size, end):
                if kind2 == IFLA_IFNAME:
                    name = data[a:b].split(b"\0", 1)[0].decode()
                elif kind2 == IFLA_STATS64 and b - a >= LINK_STATS64.size:
                    stats = LINK_STATS64.unpack_from(data, a)
            if name is not None and stats is not None:
                out[name] = LinkCounters(*stats, running=bool(flags & IFF_UP
                                                              and flags & IFF_RUNNING))
    return out, done


class LinkReader:
    """Counters and carrier of every interface of a namespace, one netlink dump per call
    (parsed here for the few fields read, as :class:`QueueReader` is, for the same
    reason: a sample a second of a fabric's hundreds of ports)."""

    def __init__(self, sock: socket.socket | None = None):
        self._sock = sock if sock is not None else route_socket()
        self._sock.settimeout(2.0)
        self._seq = 0

    def read(self) -> dict[str, LinkCounters]:
        self._seq += 1
        request = NLMSG.pack(NLMSG.size + IFINFO.size, RTM_GETLINK,
                             NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0)
        self._sock.send(request + IFINFO.pack(0, 0, 0, 0, 0))
        out: dict[str, LinkCounters] = {}
        while True:
            part, done = parse_link_dump(self._sock.recv(1 << 20))
            out.update(part)
            if done:
                return out

    def close(self) -> None:
        self._sock.close()


# -- a token bucket changed in place --------------------------------------------------------
def tbf_change(index: int, minor: int, rate_bps: int, burst: int, limit: int) -> bytes:
    """RTM_NEWQDISC that changes the token bucket ``minor:`` (parent 1:minor) of
    interface ``index`` in place: its rate (bits/s), burst and limit (bytes).

    Built by hand, once per port, class and state: the rate as an Ethernet link-layer
    ratespec needs no rate table, and one ``send`` costs microseconds where pyroute2's
    encoder takes milliseconds, which the reaction time would pay.

    >>> msg = tbf_change(7, 0x11, 20_000_000, 9018, 96000)
    >>> NLMSG.unpack_from(msg)[:2] == (len(msg), RTM_NEWQDISC)
    True
    """
    qopt = TBF_QOPT.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(rate_bps // 8, 0xFFFFFFFF),
                         0, 0, 0, 0, 0, 0, limit, 0, 0)
    options = attr(TCA_TBF_PARMS, qopt) + attr(TCA_TBF_BURST, struct.pack("=I", burst))
    body = (TCMSG.pack(0, index, minor << 16, 0x10000 | minor, 0) + attr(TCA_KIND, b"tbf\0")
            + attr(TCA_OPTIONS | NLA_F_NESTED, options))
    return NLMSG.pack(NLMSG.size + len(body), RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK, 0, 0) + body


# -- link state, as it changes --------------------------------------------------------------
def link_watch(path: str | os.PathLike | None = None) -> socket.socket:
    """A non-blocking netlink socket that receives the link state changes of the network
    namespace at ``path`` (None: this thread's)."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((0, RTMGRP_LINK))
        sock.setblocking(False)
        return sock
    return netns.made_in(path, make)


def link_events(data: bytes) -> list[tuple[int, bool, bool]]:
    """``(ifindex, up, running)`` of every RTM_NEWLINK message in a netlink datagram.

    ``up`` is the administrative state (IFF_UP); ``running`` adds carrier
    (IFF_RUNNING), which the peer's cut clears.

    >>> msg = NLMSG.pack(32, RTM_NEWLINK, 0, 0, 0) + IFINFO.pack(0, 1, 7, 0x1043, 0)
    >>> link_events(msg + NLMSG.pack(32, RTM_NEWLINK, 0, 0, 0) + IFINFO.pack(0, 1, 8, 0x1003, 0))
    [(7, True, True), (8, True, False)]
    """
    out = []
    for kind, body, end in messages(data):
        if kind == RTM_NEWLINK and end - body >= IFINFO.size:
            _, _, index, flags, _ = IFINFO.unpack_from(data, body)
            out.append((index, bool(flags & IFF_UP), bool(flags & IFF_UP and flags & IFF_RUNNING)))
    return out
