"""Agent service: an asyncio TCP server that answers agent-protocol requests.

One process stands for one role (retriever, tool, model, agent) and may listen
on several addresses, one per plane. For each request it reads the whole
payload, waits ``service_us`` (emulated compute, ``asyncio.sleep`` so ~1 ms
granularity), then sends the reply. A retriever given an object reader
(:mod:`traffic.object_reads`) first reads one object from the lab's store (through
the node's cache) per request, so its hop costs what the read costs. Malformed
requests close the connection and are counted. Stats are written as JSON on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from dataclasses import asdict, dataclass

from traffic import agent_protocol as proto
from traffic.object_reads import ObjectReader

log = logging.getLogger(__name__)


@dataclass
class ServiceStats:
    """Counters written to the --stats file."""

    role: str
    listen: list[str]
    started: float
    stopped: float = 0.0
    connections: int = 0
    requests: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    errors: int = 0
    malformed: int = 0
    aborted: int = 0
    object_reads: int = 0
    object_bytes: int = 0
    object_errors: int = 0


def parse_listen(text: str) -> tuple[str, int]:
    """Parse ``IP:PORT`` or ``[IPv6]:PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected IP:PORT")
    return host.strip("[]"), int(port)


class AgentService:
    """Serve requests on several listeners until ``stop()`` is called."""

    def __init__(self, role: str, listen: list[tuple[str, int]],
                 reader: ObjectReader | None = None) -> None:
        self.listen = listen
        self.reader = reader
        self.stats = ServiceStats(role, [f"{h}:{p}" for h, p in listen], time.time())
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Bind every listener (raises OSError if one cannot be bound)."""
        for host, port in self.listen:
            server = await asyncio.start_server(
                self._handle, host, port, backlog=1024, reuse_address=True
            )
            self._servers.append(server)

    async def stop(self) -> None:
        """Close listeners and cancel open connections."""
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self.stats.stopped = time.time()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats.connections += 1
        try:
            await self._serve(reader, writer)
        except proto.ProtocolError as exc:
            self.stats.errors += 1
            self.stats.malformed += 1
            log.debug("malformed request: %s", exc)
        except (asyncio.IncompleteReadError, OSError) as exc:
            self.stats.errors += 1
            self.stats.aborted += 1
            log.debug("connection aborted: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readexactly(proto.HEADER_SIZE)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise
                return  # clean EOF between requests
            request = proto.decode(head)
            if request.kind != proto.REQUEST:
                raise proto.ProtocolError(f"expected a request, got kind {request.kind}")
            await proto.read_payload(reader, request.request_bytes)
            self.stats.bytes_in += proto.HEADER_SIZE + request.request_bytes
            if self.reader is not None:
                await self._read_object()
            if request.service_us:
                await asyncio.sleep(request.service_us / 1e6)
            reply = proto.Header(
                proto.REPLY, request.hop, request.chain, request.request_bytes,
                request.reply_bytes, request.service_us,
            )
            await proto.write_message(writer, reply, request.reply_bytes)
            self.stats.bytes_out += proto.HEADER_SIZE + request.reply_bytes
            self.stats.requests += 1

    async def _read_object(self) -> None:
        record = await self.reader.read()
        self.stats.object_reads += 1
        self.stats.object_bytes += record["bytes"]
        self.stats.object_errors += record["status"] != 200


def write_json(path: str, data: dict) -> None:
    """Write ``data`` atomically (temp file + rename) so readers never see half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


async def run_service(role: str, listen: list[tuple[str, int]], stats_path: str | None,
                      reader: ObjectReader | None = None) -> None:
    """Run until SIGTERM/SIGINT, printing ``ready`` once bound; OSError if a bind fails."""
    service = AgentService(role, listen, reader)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await service.start()
    except OSError:
        await service.stop()
        raise
    print("ready", flush=True)
    await stop.wait()
    await service.stop()
    if stats_path:
        write_json(stats_path, asdict(service.stats))
