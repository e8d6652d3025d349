"""802.1AE SecTAG encoding and decoding (IEEE 802.1AE-2018 clause 9).

A MACsec frame is ``DA | SA | SecTAG | Secure Data | ICV`` where the SecTAG is
``EtherType 0x88E5 | TCI/AN | SL | PN (32 bits) | SCI (optional, 64 bits)``.
This module only handles the layout; cryptography lives in :mod:`.cipher`.

>>> tag = SecTag(an=2, pn=5, sci=bytes.fromhex("0011223344550001"))
>>> raw = tag.pack()
>>> raw.hex()
'88e52200000000050011223344550001'
>>> SecTag.unpack(raw, 0, data_len=80)[0] == tag
True
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import FrameError

ETH_P_MACSEC = 0x88E5
ETH_HLEN = 14
MAC_LEN = 6
SCI_LEN = 8
ICV_LEN = 16
#: SecTAG length without / with the explicit SCI (EtherType included).
SECTAG_LEN = 8
SECTAG_SCI_LEN = SECTAG_LEN + SCI_LEN
#: Short Length is used when the Secure Data is shorter than 48 octets.
SHORT_LEN_LIMIT = 48

TCI_V = 0x80
TCI_ES = 0x40
TCI_SC = 0x20
TCI_SCB = 0x10
TCI_E = 0x08
TCI_C = 0x04
AN_MASK = 0x03

_TAG = struct.Struct("!HBBI")


def make_sci(mac: bytes | str, port: int = 1) -> bytes:
    """Build an 8-byte SCI from a MAC address and a 16-bit port number.

    >>> make_sci("02:00:00:00:00:01").hex()
    '0200000000010001'
    """
    if isinstance(mac, str):
        mac = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(mac) != MAC_LEN:
        raise FrameError(f"MAC address must be 6 bytes, got {len(mac)}")
    if not 0 <= port <= 0xFFFF:
        raise FrameError(f"port must fit 16 bits, got {port}")
    return mac + port.to_bytes(2, "big")


def short_length(secure_data_len: int) -> int:
    """Return the SL field for a Secure Data length (0 when >= 48 octets)."""
    return secure_data_len if secure_data_len < SHORT_LEN_LIMIT else 0


@dataclass(frozen=True, slots=True)
class SecTag:
    """The SecTAG fields. ``pn`` is the 32-bit on-the-wire packet number.

    ``sci`` is present on the wire only when not None (the SC bit).
    """

    an: int
    pn: int
    sci: bytes | None = None
    es: bool = False
    scb: bool = False
    e: bool = False
    c: bool = False
    sl: int = 0

    @property
    def tci(self) -> int:
        """The TCI/AN octet (V bit always 0)."""
        return (
            (TCI_ES if self.es else 0)
            | (TCI_SC if self.sci is not None else 0)
            | (TCI_SCB if self.scb else 0)
            | (TCI_E if self.e else 0)
            | (TCI_C if self.c else 0)
            | (self.an & AN_MASK)
        )

    @property
    def length(self) -> int:
        """Octets this SecTAG occupies on the wire."""
        return SECTAG_SCI_LEN if self.sci is not None else SECTAG_LEN

    def pack(self) -> bytes:
        """Encode the SecTAG, EtherType included."""
        if not 0 <= self.an <= AN_MASK:
            raise FrameError(f"AN must be 0..3, got {self.an}")
        if not 0 <= self.pn <= 0xFFFFFFFF:
            raise FrameError(f"wire PN must fit 32 bits, got {self.pn}")
        if not 0 <= self.sl < SHORT_LEN_LIMIT:
            raise FrameError(f"SL must be 0..47, got {self.sl}")
        head = _TAG.pack(ETH_P_MACSEC, self.tci, self.sl, self.pn)
        if self.sci is None:
            return head
        if len(self.sci) != SCI_LEN:
            raise FrameError(f"SCI must be 8 bytes, got {len(self.sci)}")
        return head + self.sci

    @classmethod
    def unpack(
        cls,
        buf: bytes,
        offset: int = ETH_HLEN - 2,
        data_len: int | None = None,
        icv_len: int = ICV_LEN,
    ) -> tuple[SecTag, int]:
        """Decode a SecTAG at ``offset`` (the EtherType); return it and its length.

        ``data_len`` is the number of octets after the 8-octet basic tag (SCI,
        Secure Data and ICV); when given, SL is checked against it. Raises FrameError for
        any violation of 802.1AE 9.3-9.9 (V=1, ES with SC, SC with SCB, SL out
        of range or inconsistent, E without C, truncated tag).
        """
        if len(buf) < offset + SECTAG_LEN:
            raise FrameError("frame too short for a SecTAG")
        etype, tci, sl, pn = _TAG.unpack_from(buf, offset)
        if etype != ETH_P_MACSEC:
            raise FrameError(f"EtherType 0x{etype:04x} is not MACsec")
        if tci & TCI_V:
            raise FrameError("version bit set")
        if tci & TCI_ES and tci & TCI_SC:
            raise FrameError("ES and SC both set")
        if tci & TCI_SC and tci & TCI_SCB:
            raise FrameError("SC and SCB both set")
        if tci & TCI_E and not tci & TCI_C:
            raise FrameError("E set without C")
        if sl & 0xC0 or sl >= SHORT_LEN_LIMIT:
            raise FrameError(f"bad short length octet 0x{sl:02x}")
        tag_len = SECTAG_SCI_LEN if tci & TCI_SC else SECTAG_LEN
        if len(buf) < offset + tag_len:
            raise FrameError("frame too short for the SCI")
        sci = bytes(buf[offset + SECTAG_LEN : offset + tag_len]) if tci & TCI_SC else None
        if data_len is not None:
            secure_len = data_len - (tag_len - SECTAG_LEN) - icv_len
            if secure_len < 0:
                raise FrameError("frame too short for the ICV")
            if sl and sl != secure_len:
                raise FrameError(f"SL {sl} does not match secure data length {secure_len}")
            if not sl and secure_len < SHORT_LEN_LIMIT:
                raise FrameError(f"SL 0 with short secure data ({secure_len} octets)")
        tag = cls(
            an=tci & AN_MASK,
            pn=pn,
            sci=sci,
            es=bool(tci & TCI_ES),
            scb=bool(tci & TCI_SCB),
            e=bool(tci & TCI_E),
            c=bool(tci & TCI_C),
            sl=sl,
        )
        return tag, tag_len


@dataclass(frozen=True, slots=True)
class ParsedFrame:
    """A MACsec frame split into its parts (all slices are bytes)."""

    dst: bytes
    src: bytes
    tag: SecTag
    header: bytes  # DA | SA | SecTAG: the AAD when confidentiality is used
    secure_data: bytes
    icv: bytes


def is_macsec(frame: bytes) -> bool:
    """True when the frame's EtherType is 0x88E5 (no validation)."""
    return len(frame) >= ETH_HLEN and frame[12] == 0x88 and frame[13] == 0xE5


def parse(frame: bytes, icv_len: int = ICV_LEN) -> ParsedFrame:
    """Split a MACsec frame; raise FrameError when it is malformed.

    >>> f = bytes(12) + SecTag(an=0, pn=1, sl=2).pack() + b"ab" + bytes(16)
    >>> p = parse(f)
    >>> (p.tag.pn, p.secure_data, len(p.icv))
    (1, b'ab', 16)
    """
    if len(frame) < ETH_HLEN:
        raise FrameError("frame shorter than an Ethernet header")
    data_len = len(frame) - (ETH_HLEN - 2) - SECTAG_LEN
    tag, tag_len = SecTag.unpack(frame, ETH_HLEN - 2, data_len, icv_len)
    hdr_len = 2 * MAC_LEN + tag_len
    if len(frame) < hdr_len + icv_len:
        raise FrameError("frame too short for the ICV")
    return ParsedFrame(
        dst=bytes(frame[0:6]),
        src=bytes(frame[6:12]),
        tag=tag,
        header=bytes(frame[:hdr_len]),
        secure_data=bytes(frame[hdr_len : len(frame) - icv_len]),
        icv=bytes(frame[len(frame) - icv_len :]),
    )
