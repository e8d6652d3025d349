"""Wire format: header round trip, length and range checks, one real exchange."""

import asyncio
import socket
import struct

import pytest

from traffic import agent_protocol as proto
from traffic.agent_driver import error_text, exchange
from traffic.agent_service import AgentService, parse_listen


def test_round_trip_and_size():
    h = proto.Header(proto.REQUEST, hop=7, chain=2**40, request_bytes=1024,
                     reply_bytes=32768, service_us=500)
    data = proto.encode(h)
    assert len(data) == proto.HEADER_SIZE == 28
    assert data[:4] == b"AGNT"
    assert proto.decode(data) == h


def _raw(**kw):
    fields = dict(magic=b"AGNT", version=1, kind=0, hop=0, chain=0, req=0, rep=0, us=0)
    fields.update(kw)
    return proto.HEADER.pack(*fields.values())


@pytest.mark.parametrize("raw, message", [
    (_raw(magic=b"XXXX"), "magic"),
    (_raw(version=9), "version"),
    (_raw(kind=5), "kind"),
    (_raw(req=proto.MAX_BYTES + 1), "request_bytes"),
    (_raw(rep=proto.MAX_BYTES + 1), "reply_bytes"),
    (_raw(us=proto.MAX_SERVICE_US + 1), "service_us"),
    (_raw()[:-1], "header is 27 bytes"),
    (_raw() + b"\0", "header is 29 bytes"),
])
def test_decode_rejects(raw, message):
    with pytest.raises(proto.ProtocolError, match=message):
        proto.decode(raw)


def test_encode_rejects_out_of_range():
    with pytest.raises(proto.ProtocolError):
        proto.encode(proto.Header(proto.REQUEST, 0, 0, -1, 0))
    with pytest.raises(proto.ProtocolError):
        proto.encode(proto.Header(proto.REQUEST, 70000, 0, 0, 0))


def test_parse_listen():
    assert parse_listen("10.0.0.2:7001") == ("10.0.0.2", 7001)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("10.0.0.2", "10.0.0.2:x", ":80", "1.2.3.4:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_error_text():
    assert error_text(TimeoutError()) == "timeout"
    assert error_text(ConnectionRefusedError(111, "refused")) == "ECONNREFUSED"
    assert error_text(asyncio.IncompleteReadError(b"", 28)) == "EOF"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_exchange_and_malformed_in_process():
    async def scenario():
        port = _port()
        service = AgentService("model", [("127.0.0.1", port)])
        await service.start()
        try:
            req = proto.Header(proto.REQUEST, 1, 42, 100_000, 300_000, 1000)
            await exchange("127.0.0.1", port, req)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(struct.pack("!28s", b"garbage"))
            assert await reader.read() == b""  # server closed the connection
            writer.close()
            await asyncio.sleep(0.05)
        finally:
            await service.stop()
        return service.stats

    stats = asyncio.run(scenario())
    assert stats.requests == 1
    assert stats.bytes_in == 28 + 100_000  # only complete, valid requests count
    assert stats.bytes_out == 28 + 300_000
    assert stats.malformed == 1 and stats.errors == 1
