"""Object reads of the retriever hop: keys drawn by popularity, read over HTTP from S3.

A retriever that serves a chain's hop first fetches the documents it retrieves: one
object of the lab's store a request, read through the node-local cache (or straight
from the store), and only then answers. Key popularity is Zipf, as in the caches this
models (a few hot keys, a long tail): key ``i`` (rank ``i + 1``) is drawn with weight
``1 / (i + 1) ** s`` from a generator seeded by the scenario, so a run repeats its
sequence of keys. Each read is one JSON line: key, status, bytes, seconds and the
cache's verdict (``HIT``, ``MISS``; none when read from the store directly).

The GET is HTTP/1.0 on a fresh connection: the reply then carries its length or ends
with the connection, never chunked, and the read's time includes connecting, as a
retriever's first read of a document would. It is asyncio's own, as the agent service
that reads is an asyncio server (a blocking client would stall its other requests);
the lab's command-line tools use the blocking one of :mod:`testbed.storage.s3`.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import random
import time
from typing import TextIO
from urllib.parse import urlsplit

#: response header in which the node-local cache (testbed.storage.cache) says HIT, MISS...
CACHE_HEADER = "X-Cache-Status"


def key_name(index: int) -> str:
    """The name of object ``index`` in the store.

    >>> key_name(7)
    'obj00007'
    """
    return f"obj{index:05d}"


class KeyPicker:
    """Draws key indexes ``0 .. keys - 1`` with Zipf popularity of exponent ``s``.

    >>> first, again = KeyPicker(100, 1.0, seed=3), KeyPicker(100, 1.0, seed=3)
    >>> draws = [first.pick() for _ in range(2000)]
    >>> draws == [again.pick() for _ in range(2000)]
    True
    >>> draws.count(0) > draws.count(1) > draws.count(50)
    True
    >>> uniform = KeyPicker(3, 0.0, seed=1)
    >>> sorted({uniform.pick() for _ in range(200)})
    [0, 1, 2]
    """

    def __init__(self, keys: int, s: float, seed: int) -> None:
        if keys < 1:
            raise ValueError(f"keys must be >= 1, got {keys}")
        if s < 0:
            raise ValueError(f"zipf exponent must be >= 0, got {s}")
        self._cumulative = list(itertools.accumulate(1 / (i + 1) ** s for i in range(keys)))
        self._rng = random.Random(seed)

    def share(self, k: int) -> float:
        """The share of the reads that the ``k`` most popular keys draw (for zipf 1.0,
        H_k / H_n).

        >>> round(KeyPicker(100, 1.0, seed=1).share(27), 4)
        0.7502
        """
        return self._cumulative[k - 1] / self._cumulative[-1] if k > 0 else 0.0

    def pick(self) -> int:
        point = self._rng.random() * self._cumulative[-1]
        return min(bisect.bisect_right(self._cumulative, point), len(self._cumulative) - 1)


async def http_get(url: str, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """GET ``url`` (HTTP/1.0, plain): status, headers (lower-case names) and body."""
    parts = urlsplit(url)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(parts.hostname, parts.port or 80), timeout)
    try:
        writer.write(f"GET {parts.path} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode())
        return await asyncio.wait_for(_reply(reader), timeout)
    finally:
        writer.close()


async def _reply(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return status, headers, body


class ObjectReader:
    """Reads one object a call from ``endpoint`` (``http://HOST:PORT/BUCKET``) and writes
    each read's record to ``out``."""

    def __init__(self, endpoint: str, picker: KeyPicker, out: TextIO,
                 timeout: float = 10.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.picker = picker
        self.out = out
        self.timeout = timeout

    async def read(self) -> dict:
        key = key_name(self.picker.pick())
        t0 = time.perf_counter()
        try:
            status, headers, body = await http_get(f"{self.endpoint}/{key}", self.timeout)
            record = {"status": status, "bytes": len(body),
                      "cache": headers.get(CACHE_HEADER.lower())}
        except (TimeoutError, OSError, ValueError, IndexError,
                asyncio.IncompleteReadError) as exc:
            record = {"status": 0, "bytes": 0, "cache": None, "error": type(exc).__name__}
        record = {"t": time.time(), "key": key, **record,
                  "seconds": round(time.perf_counter() - t0, 6)}
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        return record
