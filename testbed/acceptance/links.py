"""The link check: every link at its configured rate, both directions, frames counted.

One end of a link sends test frames (an Ethernet frame of the local experimental
ethertype 0x88B5, to the nearest-bridge group address, which no switch forwards: see
:mod:`.lldp`) paced at (nearly) the link's configured rate for :data:`WINDOW_S`, from a raw
packet socket on its interface, in the namespace that holds it; the other end counts
them on its own. Both directions of a link run at once (each has its own egress queue
and shaper), and :data:`BATCH` links at a time.

A direction's figures: frames offered (sent, or refused by a full egress queue, which
is loss too), frames received, the rate they arrived at (bytes over the span from the
first to the last arrival) and the loss. Verdict, by a rule set before any fault was
planted: a direction passes when it arrives at :data:`RATE_MIN` or more of the link's
rate and loses :data:`LOSS_MAX` or less; a link passes when both directions do. If
the sending end could not offer :data:`OFFER_MIN` of its frames in the window, or the
receiving socket or the kernel's input backlog dropped frames (the machine, not the
link), the direction is not measured. A direction that fails or is not measured is
measured again, alone, and that measurement stands: a fault shows again, a moment in
which the machine fell behind does not (once, on a 2-core machine right after another
lab's teardown, four healthy links of the default fabric lost 0.7-1.3 % in their
batch). A link still not measured is excluded as such.

Frames are sized so that every direction carries about :data:`FRAMES` in its window
(sent at :data:`OFFER` of the rate, so a queue that took a burst drains again): a port
that loses 2 % loses 15.5 of 776 on average, and 3 or fewer (what :data:`LOSS_MAX`
allows) with a probability of about 1.4e-4; a link at a quarter of its rate arrives at
a quarter and loses the rest at its sending end's full queue.
"""

from __future__ import annotations

import errno
import fcntl
import select
import socket
import struct
import termios
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scapy.layers.l2 import Ether
from scapy.packet import Raw

from testbed.acceptance.lldp import NEAREST_BRIDGE, PACKET_OUTGOING, End
from testbed.host import netns

ETH_P_TEST = 0x88B5  # IEEE 802 local experimental ethertype 1
MAGIC = b"TBLK"
HEADER = struct.Struct("!4sIHI")  # magic, check id, direction, sequence number
FRAME_BYTES = 1514  # the smallest test frame (a faster link's frames are larger)
FRAMES = 800  # a direction's frames in its window, at least (the loss figure's resolution)
WINDOW_S = 0.5
GRACE_S = 0.3  # after the last frame: what a quarter-rate link still had queued arrives
BATCH = 4
RATE_MIN = 0.9
LOSS_MAX = 0.005
OFFER = 0.97  # of the link's rate: a queue that took a burst drains again
OFFER_MIN = 0.95
TICK_S = 0.001
DEADLINE = 1.5  # windows a sender may take when its link's queue holds frames back
RCVBUF_BYTES = 16 * 1024 * 1024
SOL_PACKET = 263
PACKET_STATISTICS = 6  # struct tpacket_stats: packets, drops (reset when read)


@dataclass(frozen=True)
class Direction:
    """One way over one link: from ``src`` to ``dst`` at the link's rate."""

    link: str
    src: End
    dst: End
    mbps: float
    label: str = ""  # how reports name it (the ends' short names); else the interfaces'

    @property
    def name(self) -> str:
        return self.label or f"{self.src.ifname}>{self.dst.ifname}"


@dataclass
class Measured:
    """What one direction carried."""

    planned: int = 0
    offered: int = 0
    refused: int = 0  # the sender's egress queue was full: lost at the sending end
    received: int = 0
    bytes: int = 0
    first: float = 0.0
    last: float = 0.0
    seqs: set[int] = field(default_factory=set)
    overrun: int = 0  # frames the receiving socket dropped (the machine, not the link)
    sent_at: list[float] = field(default_factory=list)  # by sequence number
    arrived_at: dict[int, float] = field(default_factory=dict)

    def latency_ms(self) -> float | None:
        """The median one-way time of the frames that arrived (one clock: both ends'
        sockets are this process's)."""
        times = sorted(t - self.sent_at[s] for s, t in self.arrived_at.items()
                       if s < len(self.sent_at))
        return round(times[len(times) // 2] * 1000, 3) if times else None

    def rate_mbps(self) -> float:
        if self.received < 2 or self.last <= self.first:
            return 0.0
        # n frames arrive over n-1 gaps; the first one's bytes are not in the span
        bits = self.bytes * (self.received - 1) / self.received * 8
        return bits / (self.last - self.first) / 1e6

    def loss(self) -> float:
        return 1 - len(self.seqs) / self.offered if self.offered else 0.0

    def measured(self) -> bool:
        return (self.planned > 0 and self.offered >= OFFER_MIN * self.planned
                and not self.overrun)


def frame_bytes(mbps: float, mtu: int, window_s: float = WINDOW_S) -> int:
    """A test frame's size for a link: :data:`FRAMES` in the window at the link's rate,
    so that a fast link costs no more frames a second than a slow one; at least
    :data:`FRAME_BYTES`, at most the link's MTU.

    >>> frame_bytes(20, 9000), frame_bytes(100, 9000), frame_bytes(100, 1500)
    (1562, 7812, 1514)
    """
    size = int(mbps * 1e6 * window_s / 8 / FRAMES)
    return max(FRAME_BYTES, min(size, mtu + 14))


def frame(d: Direction, check_id: int, index: int, size: int) -> bytearray:
    """The test frame of direction ``index`` (its sequence number patched in per send).

    >>> d = Direction("n0-p0l0", End("n0", "n0p0r0", "02:00:00:00:00:01"),
    ...               End("p0l0", "p0l0e1", "02:00:00:00:00:02"), 20)
    >>> f = frame(d, 7, 3, 100)
    >>> len(f), f[12:14].hex(), HEADER.unpack_from(f, 14)
    (100, '88b5', (b'TBLK', 7, 3, 0))
    """
    head = HEADER.pack(MAGIC, check_id, index, 0)
    pad = max(0, size - 14 - len(head))
    return bytearray(bytes(Ether(dst=NEAREST_BRIDGE, src=d.src.mac, type=ETH_P_TEST)
                           / Raw(head + bytes(pad))))


def _socket(end: End, receive: bool = False) -> socket.socket:
    return netns.packet_socket(end.netns, end.ifname, ETH_P_TEST,
                               RCVBUF_BYTES if receive else 0)


def _queued(sock: socket.socket) -> int:
    """The bytes of this socket's frames not yet through its interface (``SIOCOUTQ``:
    their kernel buffers, charged until the frame leaves the link's queue)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(4)))[0]


def _send(sock: socket.socket, template: bytearray, mbps: float, window_s: float,
          queue_bytes: int, got: Measured) -> None:
    """Frames paced at :data:`OFFER` of ``mbps``, sent in ticks (what is due). The sender
    never lets more than half the link's egress queue wait (read from the kernel, not
    assumed): when the queue has not drained (a stall of the machine's scheduler, or a
    link slower than its rate) the due frames are held, not sent into a full queue, and
    go once it drains, until :data:`DEADLINE` windows have passed. Frames still held
    then are lost at the sending end's full queue (a slow link); frames never sent
    because the sender itself fell behind are not offered (the machine)."""
    size = len(template)
    interval = size * 8 / (OFFER * mbps * 1e6)
    room = max(1, queue_bytes // 2 // size)  # frames that may wait in the link's queue
    planned = int(window_s / interval)
    got.planned = planned
    start = time.perf_counter()
    truesize = 0  # one frame's kernel buffer, as the queue counts it
    seq = 0
    held = False
    while seq < planned and time.perf_counter() - start < DEADLINE * window_s:
        now = time.perf_counter()
        due = min(planned, int((now - start) / interval) + 1)
        held = False
        while seq < due:
            queued = _queued(sock)
            if truesize and queued + truesize > room * truesize:
                held = True  # the queue has not drained: these wait
                break
            struct.pack_into("!I", template, 14 + HEADER.size - 4, seq)
            got.sent_at.extend([0.0] * (seq + 1 - len(got.sent_at)))
            got.sent_at[seq] = time.perf_counter()
            try:
                sock.send(template)
            except OSError as exc:
                if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    return  # the interface went away: nothing more to offer
                got.refused += 1
            if not truesize:  # same-size frames: the first growth is one frame's
                truesize = max(0, _queued(sock) - queued)
            got.offered += 1
            seq += 1
        time.sleep(TICK_S)
    if held:  # the link's queue never drained enough: the rest is its loss
        got.refused += planned - seq
        got.offered += planned - seq


def _receive(socks: dict[int, tuple[socket.socket, int]], got: dict[int, Measured],
             check_id: int, until: threading.Event, grace_s: float) -> None:
    """Count every direction's frames on its receiving socket until ``until`` is set
    and ``grace_s`` more has passed."""
    by_fd = {s.fileno(): (s, i) for s, i in socks.values()}
    end_t = None
    while True:
        if until.is_set() and end_t is None:
            end_t = time.monotonic() + grace_s
        if end_t is not None and time.monotonic() >= end_t:
            return
        ready, _, _ = select.select([s for s, _ in by_fd.values()], [], [], 0.02)
        for s in ready:
            sock, index = by_fd[s.fileno()]
            while True:
                try:
                    data, addr = sock.recvfrom(65535)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:  # the interface went down: it hears no more
                    by_fd.pop(s.fileno(), None)
                    break
                if addr[2] == PACKET_OUTGOING or len(data) < 14 + HEADER.size:
                    continue
                magic, cid, idx, seq = HEADER.unpack_from(data, 14)
                if magic != MAGIC or cid != check_id or idx != index:
                    continue  # another check's, or another cable's (a miswired one)
                m = got[index]
                now = time.perf_counter()
                if not m.received:
                    m.first = now
                m.last = now
                m.received += 1
                m.bytes += len(data)
                m.seqs.add(seq)
                m.arrived_at[seq] = now
        if not by_fd:
            return


def backlog_drops() -> int:
    """Frames the kernel dropped on any CPU's input backlog so far (``/proc/net/
    softnet_stat``, second column): a veth delivers through it, so a machine that fell
    behind loses frames there that no link lost."""
    try:
        lines = Path("/proc/net/softnet_stat").read_text().split("\n")
    except OSError:
        return 0
    return sum(int(line.split()[1], 16) for line in lines if line.strip())


def measure(directions: Sequence[Direction], check_id: int, window_s: float = WINDOW_S,
            mtu: int = 1500, queue_bytes: int = 64000, size: int | None = None
            ) -> list[Measured]:
    """Every direction at once (one sender thread each, one receiver thread for all);
    frames of ``size`` bytes, else :func:`frame_bytes`."""
    got = [Measured() for _ in directions]
    dropped_before = backlog_drops()
    rx: dict[int, tuple[socket.socket, int]] = {}
    tx: dict[int, socket.socket] = {}
    try:
        for i, d in enumerate(directions):
            try:
                rx[i] = (_socket(d.dst, receive=True), i)
                tx[i] = _socket(d.src)
            except OSError:  # an interface that is gone carries nothing
                continue
        done = threading.Event()
        receiver = threading.Thread(target=_receive, args=(rx, got, check_id, done, GRACE_S),
                                    name="link-rx", daemon=True)
        receiver.start()
        senders = [threading.Thread(
            target=_send, name=f"link-tx{i}", daemon=True,
            args=(sock, frame(directions[i], check_id, i,
                              size or frame_bytes(directions[i].mbps, mtu, window_s)),
                  directions[i].mbps, window_s, queue_bytes, got[i]))
            for i, sock in tx.items()]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        done.set()
        receiver.join()
        backlog = backlog_drops() - dropped_before
        for sock, i in rx.values():
            _, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            got[i].overrun = drops + backlog
    finally:
        for sock, _ in rx.values():
            sock.close()
        for sock in tx.values():
            sock.close()
    for i, d in enumerate(directions):
        if i not in tx:  # could not even open it: as good as a dead cable
            n = size or frame_bytes(d.mbps, mtu, window_s)
            got[i].planned = got[i].offered = int(window_s * OFFER * d.mbps * 1e6 / (n * 8))
    return got


def verdict(d: Direction, m: Measured) -> str:
    """Why the direction fails ("" when it passes).

    >>> d = Direction("l", End("a", "a1", ""), End("b", "b1", ""), 20)
    >>> ok = Measured(planned=826, offered=826, received=826, bytes=826 * 1514,
    ...               first=0.0, last=0.5, seqs=set(range(826)))
    >>> verdict(d, ok)
    ''
    >>> slow = Measured(planned=826, offered=826, received=260, bytes=260 * 1514,
    ...                 first=0.0, last=0.63, seqs=set(range(260)))
    >>> verdict(d, slow)
    'a1>b1 at 5.0 of 20 Mb/s, 68.5 % lost'
    """
    if m.overrun:
        return (f"{d.name} not measured: the machine dropped {m.overrun} frames (the "
                f"receiving socket's or the kernel's input backlog)")
    if not m.measured():
        return (f"{d.name} not measured: the sender offered {m.offered} of "
                f"{m.planned} frames")
    rate, loss = m.rate_mbps(), m.loss()
    if rate >= RATE_MIN * d.mbps and loss <= LOSS_MAX:
        return ""
    parts = [f"at {rate:.1f} of {d.mbps:g} Mb/s"] if rate < RATE_MIN * d.mbps else []
    if loss > LOSS_MAX:
        parts.append(f"{loss * 100:.1f} % lost")
    return f"{d.name} " + ", ".join(parts)


@dataclass(frozen=True)
class Cable:
    """A link to check: its name, its ends (and their short names), its rate."""

    link: str
    a: End
    b: End
    a_name: str
    b_name: str
    mbps: float


def both_ways(cables: Sequence[Cable], mbps: float | None = None) -> list[Direction]:
    """Each cable a to b, then b to a, at ``mbps`` (default: its own rate)."""
    return [d for c in cables for d in (
        Direction(c.link, c.a, c.b, mbps or c.mbps, f"{c.a_name}>{c.b_name}"),
        Direction(c.link, c.b, c.a, mbps or c.mbps, f"{c.b_name}>{c.a_name}"))]


def run(cables: Sequence[Cable], check_id: int, mtu: int, queue_bytes: int,
        window_s: float = WINDOW_S, batch: int = BATCH) -> list[dict]:
    """Each link both ways, ``batch`` links at a time; a direction that fails (or whose
    sender fell behind) is measured again alone, and that second measurement stands.
    One record per link."""
    directions = both_ways(cables)
    results: list[Measured] = []
    for k in range(0, len(directions), 2 * batch):
        results += measure(directions[k:k + 2 * batch], check_id, window_s, mtu,
                           queue_bytes)
    first: dict[int, str] = {}
    for i, (d, m) in enumerate(zip(directions, results, strict=True)):
        why = verdict(d, m)
        if why:  # confirmed alone, or not: a moment the machine fell behind is no fault
            first[i] = why
            results[i], = measure([d], check_id, window_s, mtu, queue_bytes)
    out = []
    for k in range(0, len(directions), 2):
        ways = []
        for d, m in zip(directions[k:k + 2], results[k:k + 2], strict=True):
            ways.append({"direction": d.name, "mbps": d.mbps,
                         "first_try": first.get(directions.index(d), ""),
                         "offered": m.offered, "received": len(m.seqs),
                         "refused": m.refused, "overrun": m.overrun,
                         "rate_mbps": round(m.rate_mbps(), 2),
                         "loss": round(m.loss(), 4), "why": verdict(d, m)})
        reasons = [w["why"] for w in ways if w["why"]]
        out.append({"link": directions[k].link, "directions": ways,
                    "verdict": "excluded" if reasons else "accepted",
                    "reason": "; ".join(reasons)})
    return out


LIGHT_BYTES = 128
LIGHT_PPS = 500
LIGHT_S = 0.2


def light(cables: Sequence[Cable], check_id: int) -> dict[str, dict]:
    """Each link alone in the sense of its queue: small frames at :data:`LIGHT_PPS` both
    ways (all links at once; no queue builds), so their one-way time is the wire's.
    Per link: the slower direction's median one-way ``latency_ms`` and the larger
    ``loss``."""
    mbps = LIGHT_PPS * LIGHT_BYTES * 8 / 1e6 / OFFER
    directions = both_ways(cables, mbps)
    got = measure(directions, check_id, LIGHT_S, size=LIGHT_BYTES)
    out: dict[str, dict] = {}
    for k in range(0, len(directions), 2):
        lat = [m.latency_ms() for m in got[k:k + 2]]
        out[directions[k].link] = {
            "latency_ms": None if None in lat else max(lat),  # type: ignore[type-var]
            "loss": round(max(m.loss() for m in got[k:k + 2]), 4),
            "directions": [{"direction": d.name, "latency_ms": m.latency_ms(),
                            "loss": round(m.loss(), 4)}
                           for d, m in zip(directions[k:k + 2], got[k:k + 2], strict=True)]}
    return out
