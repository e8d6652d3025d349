"""RoCEv2 frames: built once with Scapy, then patched in place with a fast ICRC.

A RoCEv2 packet is Ether/IPv4/UDP(dport 4791)/BTH/payload/ICRC.  The ICRC is a
CRC-32 (zlib's) over a pseudo header: 8 bytes of 0xFF standing in for the
InfiniBand LRH, then the IP/UDP/BTH headers with the fields that routers may
change (IP TOS, TTL and checksum, UDP checksum, the BTH byte holding
FECN/BECN/reserved) masked to all ones, then the payload.  It is stored on the
wire least significant byte first.  Scapy computes it the slow way; here the
constant IP/UDP part is folded into a CRC state once per template so each
frame costs one crc32 over BTH and payload.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from typing import NamedTuple

ROCE_PORT = 4791
#: DSCP of RoCE data (AF31, the usual lossless RoCE class); CNPs use 48
DATA_DSCP = 26

SEND_FIRST = 0x00
SEND_MIDDLE = 0x01
SEND_LAST = 0x02
SEND_ONLY = 0x04
CNP_OPCODE = 0x81

ECN_NOT_ECT = 0b00
ECN_ECT1 = 0b01
ECN_ECT0 = 0b10
ECN_CE = 0b11

ETH_LEN = 14
IP_LEN = 20
UDP_LEN = 8
BTH_LEN = 12
ICRC_LEN = 4
HEADERS_LEN = ETH_LEN + IP_LEN + UDP_LEN + BTH_LEN  # 54: payload offset in a frame
OVERHEAD = HEADERS_LEN + ICRC_LEN  # frame bytes that are not payload

PSN_MASK = 0xFFFFFF
DEFAULT_IP_ID = 0  # our senders use IP ID 0 with DF, so a UDP receiver can rebuild the header

_FF8 = b"\xff" * 8
_PSEUDO_UDP_HDR = struct.Struct("!HHHH")


class Bth(NamedTuple):
    """The BTH fields a receiver needs, plus whether the ICRC checked out."""

    opcode: int
    dqpn: int
    psn: int
    icrc_ok: bool | None  # None when the IP header was not available to check


def _masked_ip_udp(ip_udp: bytes | bytearray | memoryview) -> bytes:
    """Return the 8-byte 0xFF prefix plus IPv4+UDP headers with variant fields masked."""
    hdr = bytearray(ip_udp[: IP_LEN + UDP_LEN])
    ihl = (hdr[0] & 0x0F) * 4
    if ihl != IP_LEN:
        raise ValueError("IPv4 options are not supported in RoCEv2 frames")
    hdr[1] = 0xFF  # DSCP + ECN
    hdr[8] = 0xFF  # TTL
    hdr[10:12] = b"\xff\xff"  # header checksum
    hdr[26:28] = b"\xff\xff"  # UDP checksum
    return _FF8 + bytes(hdr)


def _masked_bth(bth: bytes | bytearray | memoryview) -> bytes:
    """Return the 12 BTH bytes with the FECN/BECN/reserved byte set to all ones."""
    out = bytearray(bth[:BTH_LEN])
    out[4] = 0xFF
    return bytes(out)


def icrc_ipv4(ip_packet: bytes | bytearray | memoryview) -> bytes:
    """Compute the 4 wire bytes of the ICRC for an IPv4 RoCEv2 packet.

    ``ip_packet`` runs from the IP header up to, not including, the ICRC.
    """
    mv = memoryview(ip_packet)
    crc = zlib.crc32(_masked_ip_udp(mv))
    crc = zlib.crc32(_masked_bth(mv[IP_LEN + UDP_LEN :]), crc)
    crc = zlib.crc32(mv[IP_LEN + UDP_LEN + BTH_LEN :], crc)
    return struct.pack("<I", crc)


def _bth_fields(mv: memoryview) -> tuple[int, int, int]:
    """Return opcode, dest QP and PSN from the first 12 bytes of ``mv``."""
    opcode = mv[0]
    dqpn = (mv[5] << 16) | (mv[6] << 8) | mv[7]
    psn = (mv[9] << 16) | (mv[10] << 8) | mv[11]
    return opcode, dqpn, psn


def parse(
    udp_payload: bytes | bytearray | memoryview,
    src: tuple[str, int] | None = None,
    dst: tuple[str, int] | None = None,
    ip_id: int = DEFAULT_IP_ID,
    dont_fragment: bool = True,
) -> Bth:
    """Parse a RoCEv2 UDP payload (BTH..ICRC) as a kernel UDP socket delivers it.

    To check the ICRC the IP and UDP headers are rebuilt from ``src``/``dst``
    (address, port) pairs as ``recvfrom`` reports them, assuming the sender's
    IP ID and DF flag (``FrameTemplate`` always sends ID 0 with DF).  Without
    both addresses ``icrc_ok`` is None.
    """
    mv = memoryview(udp_payload)
    if len(mv) < BTH_LEN + ICRC_LEN:
        raise ValueError(f"RoCEv2 payload too short: {len(mv)} bytes")
    opcode, dqpn, psn = _bth_fields(mv)
    if src is None or dst is None:
        return Bth(opcode, dqpn, psn, None)
    prefix = _udp_prefix_crc(src, dst, len(mv), ip_id, dont_fragment)
    crc = zlib.crc32(mv[BTH_LEN:-ICRC_LEN], zlib.crc32(_masked_bth(mv), prefix))
    return Bth(opcode, dqpn, psn, struct.pack("<I", crc) == bytes(mv[-ICRC_LEN:]))


@functools.lru_cache(maxsize=1024)
def _udp_prefix_crc(
    src: tuple[str, int], dst: tuple[str, int], udp_payload_len: int, ip_id: int, df: bool
) -> int:
    """CRC state after the masked pseudo header of a rebuilt IPv4/UDP header (cached)."""
    udp_len = UDP_LEN + udp_payload_len
    ip_hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        IP_LEN + udp_len,
        ip_id,
        0x4000 if df else 0,
        0,
        socket.IPPROTO_UDP,
        0,
        socket.inet_aton(src[0]),
        socket.inet_aton(dst[0]),
    )
    udp_hdr = _PSEUDO_UDP_HDR.pack(src[1], dst[1], udp_len, 0)
    return zlib.crc32(_masked_ip_udp(ip_hdr + udp_hdr))


def parse_frame(frame: bytes | bytearray | memoryview) -> Bth:
    """Parse a whole Ethernet/IPv4/UDP RoCEv2 frame and check its ICRC exactly."""
    mv = memoryview(frame)
    if len(mv) < OVERHEAD:
        raise ValueError(f"frame too short for RoCEv2: {len(mv)} bytes")
    if mv[12:14] != b"\x08\x00" or mv[ETH_LEN + 9] != socket.IPPROTO_UDP:
        raise ValueError("not an Ethernet/IPv4/UDP frame")
    ip_total = struct.unpack_from("!H", mv, ETH_LEN + 2)[0]
    end = ETH_LEN + ip_total  # ignore Ethernet padding after the IP packet
    opcode, dqpn, psn = _bth_fields(mv[ETH_LEN + IP_LEN + UDP_LEN :])
    ok = icrc_ipv4(mv[ETH_LEN : end - ICRC_LEN]) == bytes(mv[end - ICRC_LEN : end])
    return Bth(opcode, dqpn, psn, ok)


class FrameTemplate:
    """One RoCEv2 flow's frame, built once with Scapy and patched per packet.

    ``frame`` returns a fresh ``bytes``; ``frame_into`` patches the template's
    own buffer and returns it, which is what a send loop wants (no copy).
    """

    def __init__(
        self,
        src_mac: str,
        dst_mac: str,
        src_ip: str,
        dst_ip: str,
        sport: int,
        dqpn: int,
        payload_len: int,
        ecn: int = ECN_ECT0,
        dscp: int = 0,
        ttl: int = 64,
        payload: bytes | None = None,
    ) -> None:
        from scapy.contrib.roce import BTH  # Scapy is slow to import; only templates need it
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from scapy.packet import Raw

        if payload is None:
            payload = bytes(payload_len)
        if len(payload) != payload_len:
            raise ValueError("payload length does not match payload_len")
        if not 0 <= ecn <= 3:
            raise ValueError(f"ECN must be 0..3, got {ecn}")
        pkt = (
            Ether(src=src_mac, dst=dst_mac)
            / IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, ttl=ttl, id=DEFAULT_IP_ID,
                 flags="DF")
            / UDP(sport=sport, dport=ROCE_PORT, chksum=0)
            / BTH(opcode=SEND_ONLY, dqpn=dqpn & PSN_MASK, psn=0)
            / Raw(payload)
        )
        self.buf = bytearray(bytes(pkt))
        self.payload_len = payload_len
        self.dqpn = dqpn & PSN_MASK
        self._mv = memoryview(self.buf)
        self._icrc_off = len(self.buf) - ICRC_LEN
        self._bth_off = ETH_LEN + IP_LEN + UDP_LEN
        self._prefix_crc = zlib.crc32(_masked_ip_udp(self._mv[ETH_LEN:]))
        self._payload = self._mv[HEADERS_LEN : self._icrc_off]
        self.sport = sport
        self._prefix_by_sport = {sport: self._prefix_crc}

    def set_sport(self, sport: int) -> None:
        """Change the UDP source port (RoCE entropy for spraying); the ICRC covers it."""
        if sport == self.sport:
            return
        struct.pack_into("!H", self.buf, ETH_LEN + IP_LEN, sport)
        self.sport = sport
        crc = self._prefix_by_sport.get(sport)
        if crc is None:
            crc = self._prefix_by_sport[sport] = zlib.crc32(_masked_ip_udp(self._mv[ETH_LEN:]))
        self._prefix_crc = crc

    def __len__(self) -> int:
        return len(self.buf)

    def frame_into(self, psn: int, opcode: int, dqpn: int | None = None) -> bytearray:
        """Patch PSN, opcode (and optionally dest QP) and ICRC in place; return the buffer."""
        buf = self.buf
        b = self._bth_off
        buf[b] = opcode
        if dqpn is not None and dqpn != self.dqpn:
            self.dqpn = dqpn = dqpn & PSN_MASK
            buf[b + 5] = dqpn >> 16
            buf[b + 6] = (dqpn >> 8) & 0xFF
            buf[b + 7] = dqpn & 0xFF
        psn &= PSN_MASK
        buf[b + 9] = psn >> 16
        buf[b + 10] = (psn >> 8) & 0xFF
        buf[b + 11] = psn & 0xFF
        bth = bytearray(buf[b : b + BTH_LEN])
        bth[4] = 0xFF
        crc = zlib.crc32(self._payload, zlib.crc32(bth, self._prefix_crc))
        struct.pack_into("<I", buf, self._icrc_off, crc)
        return buf

    def frame(self, psn: int, opcode: int, dqpn: int | None = None) -> bytes:
        """Return a complete frame for ``psn`` and ``opcode`` as new bytes."""
        return bytes(self.frame_into(psn, opcode, dqpn))


def cnp_frame(
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    dqpn: int,
    sport: int = 0,
    dscp: int = 48,
) -> bytes:
    """Build a DCQCN Congestion Notification Packet (BTH opcode 0x81, BECN set).

    Receivers send it to the sender of CE-marked traffic; ``dqpn`` is the
    sender's QP.  DSCP 48 is the usual CNP priority; CNPs are not ECN-capable.
    """
    from scapy.contrib.roce import cnp
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pkt = (
        Ether(src=src_mac, dst=dst_mac)
        / IP(src=src_ip, dst=dst_ip, tos=dscp << 2, id=DEFAULT_IP_ID, flags="DF")
        / UDP(sport=sport, dport=ROCE_PORT, chksum=0)
        / cnp(dqpn & PSN_MASK)
    )
    return bytes(pkt)
