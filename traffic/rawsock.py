"""Fast frame sender over a raw AF_PACKET socket, with token-bucket pacing.

Frames are crafted once (with Scapy or a ``FrameTemplate``) and sent as bytes.
Pacing never sleeps per packet: a token bucket is refilled from the clock,
a burst of frames is sent while tokens last, then the sender idles until
enough tokens for the next burst have accrued.  The idle step is a callback,
so a caller can drain its receive sockets instead of sleeping.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

ETH_P_ALL = 0x0003
SNDBUF_BYTES = 8 * 1024 * 1024
ENOBUFS_BACKOFF_S = 50e-6
PACKET_QDISC_BYPASS = 20  # from linux/if_packet.h; Python's socket module lacks it
SOL_PACKET = 263  # linux/socket.h; not in Python 3.11's socket module either
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)

IdleFn = Callable[[float], None]


class TokenBucket:
    """Tokens accrue at ``rate`` per second up to ``burst``; sending spends them.

    Units are the caller's: packets for a pps limit, bits for a Mb/s limit.
    The bucket starts full so the first burst goes out at once.
    """

    def __init__(self, rate: float, burst: float, now: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        if burst <= 0:
            raise ValueError(f"burst must be positive, got {burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = time.perf_counter() if now is None else now

    def refill(self, now: float) -> float:
        """Add the tokens earned since the last refill; return the balance."""
        elapsed = now - self.last
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
            self.last = now
        return self.tokens

    def wait_for(self, amount: float) -> float:
        """Seconds until the balance reaches ``amount`` (capped at the burst size)."""
        deficit = min(amount, self.burst) - self.tokens
        return deficit / self.rate if deficit > 0 else 0.0


def bucket_for(
    pps: float | None = None,
    mbps: float | None = None,
    max_cost_bits: int = 1514 * 8,
    burst_s: float = 0.002,
) -> tuple[TokenBucket, bool] | None:
    """Make a bucket for a pps or Mb/s limit; the bool says whether costs are bits.

    The burst holds ``burst_s`` worth of tokens (at least one largest packet),
    which sets how often the sender wakes up.  None means no limit.
    """
    if pps is not None and mbps is not None:
        raise ValueError("give a packet rate or a bit rate, not both")
    if pps is not None:
        return TokenBucket(pps, max(1.0, pps * burst_s)), False
    if mbps is not None:
        rate = mbps * 1e6
        return TokenBucket(rate, max(float(max_cost_bits), rate * burst_s)), True
    return None


@dataclass
class SendStats:
    """What a send run did."""

    packets: int = 0
    bytes: int = 0
    seconds: float = 0.0
    enobufs: int = 0


class RawSender:
    """A raw AF_PACKET socket bound to one interface, sending whole Ethernet frames."""

    def __init__(self, iface: str, sndbuf: int = SNDBUF_BYTES, qdisc_bypass: bool = False):
        self.iface = iface
        socket.if_nametoindex(iface)  # raises OSError for an unknown interface
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, sndbuf)
            except PermissionError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            if qdisc_bypass:
                # Skips tc qdiscs on this interface: faster, but defeats any shaping there.
                self.sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
            self.sock.bind((iface, 0))
        except OSError:
            self.sock.close()
            raise
        self.enobufs = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, frame: bytes | bytearray | memoryview) -> None:
        """Send one frame, backing off briefly and retrying while the queue is full."""
        while True:
            try:
                self.sock.send(frame)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    raise
                self.enobufs += 1
                time.sleep(ENOBUFS_BACKOFF_S)

    def send_all(
        self,
        frames: Sequence[bytes],
        loops: int = 1,
        pps: float | None = None,
        mbps: float | None = None,
        idle: IdleFn = time.sleep,
    ) -> SendStats:
        """Send ``frames`` ``loops`` times, as fast as possible or paced."""
        if loops < 1:
            raise ValueError(f"loops must be >= 1, got {loops}")
        enobufs0 = self.enobufs
        start = time.perf_counter()
        total_bytes = sum(len(f) for f in frames) * loops
        max_len = max((len(f) for f in frames), default=64)
        paced = bucket_for(pps, mbps, max_cost_bits=max_len * 8)
        if paced is None:
            self._send_topspeed(frames, loops)
        else:
            bucket, in_bits = paced
            costs = [len(f) * 8 for f in frames] if in_bits else [1] * len(frames)
            self._send_paced(frames, costs, loops, bucket, idle)
        return SendStats(
            packets=len(frames) * loops,
            bytes=total_bytes,
            seconds=time.perf_counter() - start,
            enobufs=self.enobufs - enobufs0,
        )

    def _send_topspeed(self, frames: Sequence[bytes], loops: int) -> None:
        send = self.sock.send
        for _ in range(loops):
            for frame in frames:
                try:
                    send(frame)
                except OSError as exc:
                    if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                        raise
                    self.enobufs += 1
                    time.sleep(ENOBUFS_BACKOFF_S)
                    self.send(frame)

    def _send_paced(
        self,
        frames: Sequence[bytes],
        costs: Sequence[int],
        loops: int,
        bucket: TokenBucket,
        idle: IdleFn,
    ) -> None:
        send = self.send
        clock = time.perf_counter
        n = len(frames)
        half_burst = bucket.burst / 2
        for _ in range(loops):
            i = 0
            while i < n:
                tokens = bucket.refill(clock())
                while i < n and tokens >= costs[i]:
                    send(frames[i])
                    tokens -= costs[i]
                    i += 1
                bucket.tokens = tokens
                if i < n:
                    # Wait for half a burst, not one packet, so wake-ups stay rare.
                    idle(bucket.wait_for(max(costs[i], half_burst)))
