"""An attacker on the protected wire: replays, tampers with and forges frames.

Run inside the attacker namespace (``python -m testbed.macsec.attacker --iface IF
...``). From the moment its capture socket is open (it then creates the ``--ready``
file) until the injection time it records MACsec frames that the victim's peer sent
(source MAC ``--peer-mac``): the oldest ones of each secure association (AN) are kept for
replay, the newest one is the template for tampering. The injection time (epoch seconds)
is what the run writes into ``--inject-at-file`` once its traffic starts, so that an
attacker started before the traffic sees it from its first frame.

A replayed frame is late only once its SA has carried ``--window`` frames after it (the
receiver accepts any PN within its replay window, duplicates included): at the injection
time the attacker replays the oldest frames of the SA in use (the newest frame's AN),
and if that SA has not yet carried the window's frames since them (a slow host, a key
just rotated) it goes on capturing until it has: at most WAIT_LATE_S, and not at all when
the SA's rate so far would not get there in that time (a window larger than the run's
traffic). Frames it still had to send within the window are counted in
``replayed_in_window``. Then it sends, toward the victim (``--victim-mac``):

* ``--replayed N`` old captured frames, unchanged (the receiver must count them late);
* ``--tampered N`` copies of the newest frame with the PN moved ahead and one
  octet of the secure data flipped (the ICV check must fail);
* ``--untagged N`` plain IPv4/UDP frames without a SecTAG.

It writes what it sent as JSON to ``--out`` and exits 0.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

from testbed.numbers import flag

ETH_P_ALL = 0x0003
ETH_P_MACSEC = b"\x88\xe5"
TCI_OFFSET = 14  # DA(6) SA(6) EtherType(2), then the TCI/AN octet (AN: its low 2 bits)
PN_OFFSET = 16  # TCI/AN(1) SL(1), then the 4-octet PN
PN_JUMP = 1_000_000
GAP_S = 0.002
POLL_S = 0.1  # how often the injection time's file is read while it is not yet written
WAIT_LATE_S = 10.0  # how long after the injection time the replays may wait to be late


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def untagged_frame(dst_mac: bytes, src_mac: bytes, src_ip: str, dst_ip: str, seq: int) -> bytes:
    """A plain Ethernet/IPv4/UDP frame (port 9, discard) carrying a marker payload."""
    payload = b"tb-untagged-%06d" % seq
    udp = struct.pack("!HHHH", 40000 + seq % 1000, 9, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), seq & 0xFFFF, 0, 64,
                               17, 0, socket.inet_aton(src_ip), socket.inet_aton(dst_ip)))
    struct.pack_into("!H", ip, 10, _checksum(bytes(ip)))
    return dst_mac + src_mac + b"\x08\x00" + bytes(ip) + udp


def tampered_frame(template: bytes, i: int) -> tuple[bytes, int]:
    """``template`` with its PN moved ahead by PN_JUMP + i and one secure octet flipped."""
    frame = bytearray(template)
    pn = (struct.unpack_from("!I", frame, PN_OFFSET)[0] + PN_JUMP + i) & 0xFFFFFFFF or 1
    struct.pack_into("!I", frame, PN_OFFSET, pn)
    frame[-20] ^= 0xFF  # last octets of the secure data, just before the 16-octet ICV
    return bytes(frame), pn


class InjectTime:
    """The injection time written into ``path`` by the run, read at most every POLL_S."""

    def __init__(self, path: Path) -> None:
        self.path, self.at, self.read_at = path, None, 0.0

    def __call__(self) -> float | None:
        if self.at is None and time.monotonic() - self.read_at >= POLL_S:
            self.read_at = time.monotonic()
            try:
                self.at = float(self.path.read_text())
            except (FileNotFoundError, ValueError):  # not yet written, or half-written
                pass
        return self.at


def pn_of(frame: bytes) -> int:
    """The packet number in a MACsec frame's SecTAG."""
    return struct.unpack_from("!I", frame, PN_OFFSET)[0]


class Captured:
    """MACsec frames from one sender: per association number the oldest ``keep`` and the
    highest PN seen, and the newest frame."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.oldest: dict[int, list[bytes]] = {}
        self.highest: dict[int, int] = {}
        self.first_seen: dict[int, float] = {}
        self.newest: bytes | None = None

    def add(self, frame: bytes) -> None:
        an = frame[TCI_OFFSET] & 0x03
        self.newest = frame
        self.first_seen.setdefault(an, time.monotonic())
        kept = self.oldest.setdefault(an, [])
        if len(kept) < self.keep:
            kept.append(frame)
        self.highest[an] = max(self.highest.get(an, 0), pn_of(frame))

    def replays(self) -> list[bytes]:
        """The oldest frames of the SA in use (the newest frame's)."""
        return [] if self.newest is None else self.oldest[self.newest[TCI_OFFSET] & 0x03]

    def in_window(self, window: int) -> int:
        """How many of :meth:`replays` a receiver would still accept: their SA has not
        carried ``window`` frames after them (late: PN + window <= the highest PN)."""
        if self.newest is None:
            return 0
        highest = self.highest[self.newest[TCI_OFFSET] & 0x03]
        return sum(pn_of(f) + window > highest for f in self.replays())

    def late_in(self, window: int) -> float | None:
        """Seconds until every replay is late, at the rate the SA in use carried so far
        (0: already; None: no rate yet)."""
        replays = self.replays()
        if not replays:
            return None
        an = self.newest[TCI_OFFSET] & 0x03
        needed = max(pn_of(f) for f in replays) + window - self.highest[an]
        carried = self.highest[an] - pn_of(replays[0])
        elapsed = time.monotonic() - self.first_seen[an]
        if needed <= 0:
            return 0.0
        return needed * elapsed / carried if carried > 0 and elapsed > 0 else None


def capture(sock: socket.socket, peer_mac: bytes, seen: Captured,
            until: Callable[[], float | None],
            done: Callable[[], bool] = lambda: False) -> None:
    """Add the MACsec frames from ``peer_mac`` to ``seen`` until the time ``until()``
    names (None: not named yet) has passed, or earlier once ``done()``."""
    while True:
        end = until()
        left = POLL_S if end is None else end - time.time()
        if left <= 0 or done():
            return
        sock.settimeout(min(left, POLL_S))
        try:
            frame = sock.recv(65536)
        except TimeoutError:
            continue
        if frame[12:14] == ETH_P_MACSEC and frame[6:12] == peer_mac:
            seen.add(frame)


def attack(args: argparse.Namespace) -> dict[str, object]:
    """Capture, then inject; returns what was sent."""
    victim = bytes.fromhex(args.victim_mac.replace(":", ""))
    peer = bytes.fromhex(args.peer_mac.replace(":", ""))
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    rx.bind((args.iface, ETH_P_ALL))
    args.ready.touch()
    seen = Captured(max(args.replayed, 1))
    try:
        when = InjectTime(args.inject_at_file)
        capture(rx, peer, seen, when)
        # until there is a frame and the replays are late, while they can be in time
        later = time.time() + (WAIT_LATE_S if args.replayed else 5)

        def enough() -> bool:
            if seen.newest is None or not args.replayed:
                return seen.newest is not None
            eta = seen.late_in(args.window)  # past the wait's end: sent in the window
            return eta is not None and (eta == 0 or eta > later - time.time())

        capture(rx, peer, seen, lambda: later, enough)
    finally:
        rx.close()
    oldest, newest = seen.replays(), seen.newest
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((args.iface, 0))
    sent = {"replayed": [], "tampered": [], "untagged": 0}
    try:
        for i in range(args.replayed if oldest else 0):
            frame = oldest[i % len(oldest)]
            tx.send(frame)
            sent["replayed"].append(pn_of(frame))
            time.sleep(GAP_S)
        for i in range(args.tampered if newest else 0):
            frame, pn = tampered_frame(newest, i)
            tx.send(frame)
            sent["tampered"].append(pn)
            time.sleep(GAP_S)
        for i in range(args.untagged):
            tx.send(untagged_frame(victim, peer, args.src_ip, args.dst_ip, i))
            sent["untagged"] += 1
            time.sleep(GAP_S)
    finally:
        tx.close()
    return {"captured": len(oldest), "replayed_sent": len(sent["replayed"]),
            "tampered_sent": len(sent["tampered"]), "untagged_sent": sent["untagged"],
            "replayed_in_window": seen.in_window(args.window) if sent["replayed"] else 0,
            "replayed_an": newest[TCI_OFFSET] & 0x03 if newest else None,
            "replayed_pns": sent["replayed"], "tampered_pns": sent["tampered"],
            "finished": time.time()}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iface", required=True)
    p.add_argument("--victim-mac", required=True)
    p.add_argument("--peer-mac", required=True)
    p.add_argument("--src-ip", required=True)
    p.add_argument("--dst-ip", required=True)
    p.add_argument("--tampered", type=flag(0, 10**9, integer=True), default=0)
    p.add_argument("--replayed", type=flag(0, 10**9, integer=True), default=0)
    p.add_argument("--untagged", type=flag(0, 10**9, integer=True), default=0)
    p.add_argument("--window", type=flag(0, 2**32 - 1, integer=True), required=True,
                   help="the receiver's replay window (frames)")
    p.add_argument("--inject-at-file", type=Path, required=True,
                   help="a file the run writes the injection time into (epoch seconds)")
    p.add_argument("--ready", type=Path, required=True,
                   help="created once the capture has begun")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    result = attack(args)
    args.out.write_text(json.dumps(result))
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_pns")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
