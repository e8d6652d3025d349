"""The retriever's object reads against a local HTTP server that answers like the cache."""

from __future__ import annotations

import asyncio
import io
import json

from traffic import agent_protocol as proto
from traffic.agent_service import AgentService
from traffic.object_reads import KeyPicker, ObjectReader, key_name

SIZE = 3000


async def serve_objects(seen: list[str]) -> asyncio.Server:
    """HTTP/1.0 objects of SIZE bytes on 127.0.0.1; the first read of a key misses."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await reader.readline()).split()[1].decode()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        verdict = "HIT" if path in seen else "MISS"
        seen.append(path)
        writer.write(f"HTTP/1.0 200 OK\r\nContent-Length: {SIZE}\r\n"
                     f"X-Cache-Status: {verdict}\r\n\r\n".encode() + bytes(SIZE))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_reads_record_key_bytes_and_the_cache_verdict():
    async def main() -> list[dict]:
        seen: list[str] = []
        server = await serve_objects(seen)
        port = server.sockets[0].getsockname()[1]
        out = io.StringIO()
        reader = ObjectReader(f"http://127.0.0.1:{port}/objects", KeyPicker(5, 1.0, 2), out)
        records = [await reader.read() for _ in range(30)]
        server.close()
        await server.wait_closed()
        assert [json.loads(line) for line in out.getvalue().splitlines()] == records
        assert seen[0] == f"/objects/{records[0]['key']}"
        return records

    records = asyncio.run(main())
    assert all(r["status"] == 200 and r["bytes"] == SIZE for r in records)
    keys = [r["key"] for r in records]
    misses = [r["key"] for r in records if r["cache"] == "MISS"]
    assert sorted(misses) == sorted(set(keys))  # each key misses once, then hits
    assert keys.count(key_name(0)) > keys.count(key_name(4))


def test_a_failed_read_is_recorded_not_raised():
    async def main() -> dict:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()  # nothing listens on port now
        reader = ObjectReader(f"http://127.0.0.1:{port}/b", KeyPicker(1, 1.0, 0), io.StringIO())
        return await reader.read()

    record = asyncio.run(main())
    assert record["status"] == 0 and record["error"] == "ConnectionRefusedError"


def test_a_retriever_reads_one_object_per_request_before_it_answers():
    async def main() -> AgentService:
        server = await serve_objects([])
        port = server.sockets[0].getsockname()[1]
        reader = ObjectReader(f"http://127.0.0.1:{port}/objects", KeyPicker(3, 1.0, 1),
                              io.StringIO())
        service = AgentService("retriever", [("127.0.0.1", 0)], reader)
        await service.start()
        address = service._servers[0].sockets[0].getsockname()
        r, w = await asyncio.open_connection(*address)
        for hop in range(3):
            await proto.write_message(w, proto.Header(proto.REQUEST, hop, 1, 100, 200, 0), 100)
            reply = await proto.read_header(r)
            await proto.read_payload(r, reply.reply_bytes)
        w.close()
        await service.stop()
        server.close()
        await server.wait_closed()
        return service

    stats = asyncio.run(main()).stats
    assert (stats.requests, stats.object_reads, stats.object_bytes, stats.object_errors) == (
        3, 3, 3 * SIZE, 0)


def test_zipf_picks_keys_as_often_as_their_weight_says():
    """Key i is drawn with probability 1 / (i + 1) / H_100 for 100 keys and s = 1: key 0
    about 0.193. 200,000 draws: one standard deviation is under 0.001, the tolerance is
    over 5 of them, and the seed is fixed (the same draws every run)."""
    keys, draws = 100, 200_000
    harmonic = sum(1 / (i + 1) for i in range(keys))
    picker = KeyPicker(keys, 1.0, seed=11)
    counts = [0] * keys
    for _ in range(draws):
        counts[picker.pick()] += 1
    assert abs(1 / harmonic - 0.193) < 0.0005
    for i in (0, 1, 9, 99):
        assert abs(counts[i] / draws - 1 / (i + 1) / harmonic) < 0.005, i


def test_the_share_of_reads_is_the_pickers_own_popularity():
    zipf = KeyPicker(100, 1.0, seed=1)
    harmonic = [sum(1 / i for i in range(1, k + 1)) for k in (27, 100)]
    assert abs(zipf.share(27) - harmonic[0] / harmonic[1]) < 1e-12  # H_27 / H_100
    assert zipf.share(0) == 0.0 and zipf.share(100) == 1.0
    assert KeyPicker(4, 0.0, seed=1).share(1) == 0.25  # uniform
    picks = [zipf.pick() for _ in range(20_000)]
    assert abs(sum(p < 27 for p in picks) / len(picks) - zipf.share(27)) < 0.02
