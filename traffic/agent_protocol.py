"""Wire protocol between the agent driver and the agent services.

One exchange is a request and a reply on a TCP stream. Both start with the same
fixed 28-byte header, network byte order (``struct`` format ``!4sBBHQIII``):

====== ====== =============================================================
offset type   field
====== ====== =============================================================
0      4s     magic ``b"AGNT"``
4      B      version, currently 1
5      B      kind: 0 = request, 1 = reply
6      H      hop index within the chain (0-based)
8      Q      chain id
16     I      request_bytes: payload bytes that follow a request header
20     I      reply_bytes: payload bytes that follow the reply header
24     I      service_us: emulated compute time the server waits before replying
====== ====== =============================================================

A request header is followed by exactly ``request_bytes`` of payload; the
server reads all of it, sleeps ``service_us`` microseconds, then sends a reply
header (kind 1, the other fields echoed) followed by ``reply_bytes`` of payload.
Payload content is zeros: only sizes and timing matter. Sizes are capped at
``MAX_BYTES`` and compute at ``MAX_SERVICE_US`` so a corrupt header cannot make
a peer allocate or wait without bound; a header that fails any check raises
``ProtocolError`` and the server closes the connection and counts it. A
connection may carry several exchanges back to back (the driver uses one each).

>>> h = Header(kind=REQUEST, hop=2, chain=7, request_bytes=10, reply_bytes=20)
>>> decode(encode(h)) == h
True
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

MAGIC = b"AGNT"
VERSION = 1
REQUEST = 0
REPLY = 1
HEADER = struct.Struct("!4sBBHQIII")
HEADER_SIZE = HEADER.size
MAX_BYTES = 64 * 1024 * 1024
MAX_SERVICE_US = 60_000_000
MAX_HOP = 0xFFFF
MAX_CHAIN = 2**64 - 1
CHUNK = 64 * 1024
_ZEROS = bytes(CHUNK)


class ProtocolError(ValueError):
    """A header or payload that breaks the wire format."""


@dataclass(frozen=True)
class Header:
    """One request or reply header."""

    kind: int
    hop: int
    chain: int
    request_bytes: int
    reply_bytes: int
    service_us: int = 0


def encode(header: Header) -> bytes:
    """Pack ``header`` after checking every field is in range."""
    _check(header)
    return HEADER.pack(
        MAGIC,
        VERSION,
        header.kind,
        header.hop,
        header.chain,
        header.request_bytes,
        header.reply_bytes,
        header.service_us,
    )


def decode(data: bytes) -> Header:
    """Unpack and check one header; raise ``ProtocolError`` if malformed."""
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"header is {len(data)} bytes, expected {HEADER_SIZE}")
    magic, version, kind, hop, chain, req, rep, service_us = HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}")
    if version != VERSION:
        raise ProtocolError(f"unsupported version {version}")
    header = Header(kind, hop, chain, req, rep, service_us)
    _check(header)
    return header


def _check(header: Header) -> None:
    if header.kind not in (REQUEST, REPLY):
        raise ProtocolError(f"bad kind {header.kind}")
    if not 0 <= header.hop <= MAX_HOP:
        raise ProtocolError(f"hop {header.hop} out of range")
    if not 0 <= header.chain <= MAX_CHAIN:
        raise ProtocolError(f"chain {header.chain} out of range")
    for name in ("request_bytes", "reply_bytes"):
        value = getattr(header, name)
        if not 0 <= value <= MAX_BYTES:
            raise ProtocolError(f"{name} {value} outside [0, {MAX_BYTES}]")
    if not 0 <= header.service_us <= MAX_SERVICE_US:
        raise ProtocolError(f"service_us {header.service_us} outside [0, {MAX_SERVICE_US}]")


async def read_header(reader: asyncio.StreamReader) -> Header:
    """Read and decode one header (``IncompleteReadError`` on early EOF)."""
    return decode(await reader.readexactly(HEADER_SIZE))


async def read_payload(reader: asyncio.StreamReader, size: int) -> None:
    """Read and discard exactly ``size`` payload bytes in bounded chunks."""
    remaining = size
    while remaining:
        chunk = await reader.readexactly(min(remaining, CHUNK))
        remaining -= len(chunk)


async def write_message(writer: asyncio.StreamWriter, header: Header, size: int) -> None:
    """Send ``header`` and ``size`` zero bytes of payload, respecting flow control."""
    first = min(size, CHUNK - HEADER_SIZE)
    writer.write(encode(header) + _ZEROS[:first])  # one segment for small messages
    remaining = size - first
    while remaining:
        await writer.drain()
        n = min(remaining, CHUNK)
        writer.write(_ZEROS if n == CHUNK else _ZEROS[:n])
        remaining -= n
    await writer.drain()
