"""An attacker on the protected wire: replays, tampers with and forges frames.

Run inside the attacker namespace (``python -m testbed.macsec.attacker --iface IF
...``). From the moment its capture socket is open (it then creates the ``--ready``
file) until the injection time it records MACsec frames that the victim's peer sent
(source MAC ``--peer-mac``): the oldest ones are kept for replay, the newest one is the
template for tampering. The injection time (epoch seconds) is what the run writes into
``--inject-at-file`` once its traffic starts, so that an attacker started before the
traffic sees it from its first frame. Then it sends, toward the victim
(``--victim-mac``):

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
PN_OFFSET = 16  # DA(6) SA(6) EtherType(2) TCI/AN(1) SL(1), then the 4-octet PN
PN_JUMP = 1_000_000
GAP_S = 0.002
POLL_S = 0.1  # how often the injection time's file is read while it is not yet written


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


def capture(sock: socket.socket, peer_mac: bytes, keep: int,
            until: Callable[[], float | None]) -> tuple[list[bytes], bytes | None]:
    """Oldest ``keep`` MACsec frames from ``peer_mac`` and the newest one, until the
    time ``until()`` names (None: not named yet) has passed."""
    oldest: list[bytes] = []
    newest = None
    while True:
        end = until()
        left = POLL_S if end is None else end - time.time()
        if left <= 0:
            return oldest, newest
        sock.settimeout(min(left, POLL_S))
        try:
            frame = sock.recv(65536)
        except TimeoutError:
            continue
        if frame[12:14] == ETH_P_MACSEC and frame[6:12] == peer_mac:
            newest = frame
            if len(oldest) < keep:
                oldest.append(frame)


def attack(args: argparse.Namespace) -> dict[str, object]:
    """Capture, then inject; returns what was sent."""
    victim = bytes.fromhex(args.victim_mac.replace(":", ""))
    peer = bytes.fromhex(args.peer_mac.replace(":", ""))
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    rx.bind((args.iface, ETH_P_ALL))
    args.ready.touch()
    try:
        oldest, newest = capture(rx, peer, max(args.replayed, 1), InjectTime(args.inject_at_file))
        if newest is None:  # traffic may be late: wait a little longer for one frame
            later = time.time() + 5
            oldest, newest = capture(rx, peer, max(args.replayed, 1), lambda: later)
    finally:
        rx.close()
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((args.iface, 0))
    sent = {"replayed": [], "tampered": [], "untagged": 0}
    try:
        for i in range(args.replayed if oldest else 0):
            frame = oldest[i % len(oldest)]
            tx.send(frame)
            sent["replayed"].append(struct.unpack_from("!I", frame, PN_OFFSET)[0])
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
