"""Minimal struct-based readers for classic pcap and pcapng files (Ethernet frames).

Replay wants every frame in memory as bytes, nothing more, so this avoids
Scapy's per-packet dissection.
"""

from __future__ import annotations

import struct
from pathlib import Path

LINKTYPE_ETHERNET = 1

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<",  # microsecond, little endian
    b"\xa1\xb2\xc3\xd4": ">",
    b"\x4d\x3c\xb2\xa1": "<",  # nanosecond
    b"\xa1\xb2\x3c\x4d": ">",
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_BOM = 0x1A2B3C4D


class PcapError(ValueError):
    """The file is not a readable pcap/pcapng capture of Ethernet frames."""


def read_frames(path: str | Path) -> list[bytes]:
    """Return every captured frame of a pcap or pcapng file, in order."""
    data = Path(path).read_bytes()
    if len(data) < 4:
        raise PcapError("file too short to be a pcap")
    magic = data[:4]
    if magic in _PCAP_MAGICS:
        return _read_pcap(data, _PCAP_MAGICS[magic])
    if magic == _PCAPNG_SHB:
        return _read_pcapng(data)
    raise PcapError(f"not a pcap or pcapng file (magic {magic.hex()})")


def _read_pcap(data: bytes, endian: str) -> list[bytes]:
    if len(data) < 24:
        raise PcapError("truncated pcap global header")
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    if linktype != LINKTYPE_ETHERNET:
        raise PcapError(f"link type {linktype} is not Ethernet")
    rec = struct.Struct(endian + "IIII")
    frames = []
    off = 24
    end = len(data)
    while off + 16 <= end:
        _, _, incl, _ = rec.unpack_from(data, off)
        off += 16
        if off + incl > end:
            raise PcapError(f"truncated packet record at offset {off - 16}")
        frames.append(data[off : off + incl])
        off += incl
    if off != end:
        raise PcapError(f"trailing {end - off} bytes after last record")
    return frames


def _read_pcapng(data: bytes) -> list[bytes]:
    frames: list[bytes] = []
    linktypes: list[int] = []
    endian = "<"
    off = 0
    end = len(data)
    while off + 12 <= end:
        btype_raw = data[off : off + 4]
        if btype_raw == _PCAPNG_SHB:
            bom = struct.unpack_from("<I", data, off + 8)[0]
            endian = "<" if bom == _BOM else ">"
            if struct.unpack_from(endian + "I", data, off + 8)[0] != _BOM:
                raise PcapError("bad pcapng byte-order magic")
            linktypes = []  # interfaces are numbered per section
        btype, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or blen % 4 or off + blen > end:
            raise PcapError(f"bad pcapng block length {blen} at offset {off}")
        body = off + 8
        if btype == 1:  # Interface Description Block
            linktypes.append(struct.unpack_from(endian + "H", data, body)[0])
        elif btype == 6:  # Enhanced Packet Block
            ifid, _, _, caplen, _ = struct.unpack_from(endian + "IIIII", data, body)
            _check_ethernet(linktypes, ifid)
            frames.append(data[body + 20 : body + 20 + caplen])
        elif btype == 3:  # Simple Packet Block
            _check_ethernet(linktypes, 0)
            origlen = struct.unpack_from(endian + "I", data, body)[0]
            caplen = min(origlen, blen - 16)
            frames.append(data[body + 4 : body + 4 + caplen])
        off += blen
    if off != end:
        raise PcapError(f"trailing {end - off} bytes after last pcapng block")
    return frames


def _check_ethernet(linktypes: list[int], ifid: int) -> None:
    if ifid >= len(linktypes):
        raise PcapError(f"packet refers to undeclared interface {ifid}")
    if linktypes[ifid] != LINKTYPE_ETHERNET:
        raise PcapError(f"link type {linktypes[ifid]} is not Ethernet")


def read_records(path: str | Path) -> tuple[list[tuple[int, int, bytes]], bool]:
    """Every frame with its timestamp: ``([(seconds, fraction, frame)], nanosecond)``.

    Classic pcap keeps its timestamps (``fraction`` in micro- or nanoseconds, as the
    file says); pcapng frames come with zero timestamps.
    """
    data = Path(path).read_bytes()
    endian = _PCAP_MAGICS.get(data[:4])
    if endian is None:
        return [(0, 0, frame) for frame in read_frames(path)], False
    frames = _read_pcap(data, endian)  # checks the file
    rec = struct.Struct(endian + "IIII")
    out, off = [], 24
    for frame in frames:
        sec, frac, _, _ = rec.unpack_from(data, off)
        out.append((sec, frac, frame))
        off += 16 + len(frame)
    return out, data[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")


def write_records(path: str | Path, records: list[tuple[int, int, bytes]],
                  nanosecond: bool = False) -> None:
    """Write ``(seconds, fraction, frame)`` records as a classic pcap of Ethernet frames."""
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    parts = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 262144, LINKTYPE_ETHERNET)]
    for sec, frac, frame in records:
        parts.append(struct.pack("<IIII", sec, frac, len(frame), len(frame)))
        parts.append(bytes(frame))
    Path(path).write_bytes(b"".join(parts))


def write_pcap(path: str | Path, frames: list[bytes]) -> None:
    """Write frames as a classic microsecond pcap (timestamps zero); for tests and benches."""
    hdr = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET)
    parts = [hdr]
    for frame in frames:
        parts.append(struct.pack("<IIII", 0, 0, len(frame), len(frame)))
        parts.append(bytes(frame))
    Path(path).write_bytes(b"".join(parts))
