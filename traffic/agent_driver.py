"""Agent driver: runs many concurrent agent chains against the agent services.

A chain is a template's steps run one after another; each hop opens a fresh
TCP connection (an RPC over a new connection, so latency includes the
handshake), sends the request, waits for the whole reply, closes. A chain's
latency is therefore the sum of every hop and of every queue on the way. The
plane is fixed per chain (``chain_id % len(addresses)``) so chains spread over
planes deterministically; templates are drawn by weight with a seeded RNG.

Closed loop (default): ``concurrency`` workers each start a new chain as soon
as theirs ends. Open loop (``rate``): Poisson arrivals at ``rate`` chains/s;
an arrival that finds ``concurrency`` chains in flight is skipped and counted.
(With ``rate``, ``chains`` counts arrivals, skipped ones included.)
New chains start until ``duration`` ends or ``chains`` have started; in-flight
chains then finish or time out (``timeout_ms`` bounds each exchange; a held hop may
wait as long again first). ``interrupt()``
(SIGTERM/SIGINT) cancels in-flight chains, recorded as failed ``interrupted``.
``redirect()`` (SIGHUP with ``--directory``: a service moved to another node) changes
where the next hops of a service go; a service it *holds* (its replacement is starting)
gets no new hop until it is released: its hops wait, at most ``timeout_ms``, and their
latency includes the wait (``held_ms`` in the hop's record).

Each hop closes its connection first, leaving a TIME_WAIT socket on the driver:
sustained rates above ~28k/60 s = ~470 hops/s per destination can run out of
ephemeral ports unless the runner widens net.ipv4.ip_local_port_range.
"""

from __future__ import annotations

import asyncio
import errno
import json
import random
import socket
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

from traffic import agent_protocol as proto
from traffic.multipath import carrier, plane_order
from traffic.stats import summary

TCP_ECN_SYSCTL = "/proc/sys/net/ipv4/tcp_ecn"


@dataclass(frozen=True)
class DriverConfig:
    """Run parameters (see ``python -m traffic agent-driver --help``)."""

    duration: float | None = None
    chains: int | None = None
    concurrency: int = 8
    seed: int = 0
    timeout_ms: float = 2000.0
    ecn: bool = False
    rate: float | None = None
    #: this node's interface per plane; non-empty turns host multipath on
    multipath: tuple[str, ...] = ()
    attempt_ms: float = 500.0


def error_text(exc: BaseException) -> str:
    """Short, stable error text for a failed hop: ``timeout``, ``ECONNREFUSED``, ..."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "EOF"
    if isinstance(exc, proto.ProtocolError):
        return f"protocol: {exc}"
    if isinstance(exc, OSError) and exc.errno in errno.errorcode:
        return errno.errorcode[exc.errno]
    return f"{type(exc).__name__}: {exc}"


def read_tcp_ecn() -> int | None:
    """Return this namespace's net.ipv4.tcp_ecn (1 = request ECN), or None if unreadable."""
    try:
        with open(TCP_ECN_SYSCTL, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


async def exchange(host: str, port: int, request: proto.Header) -> None:
    """One hop: connect, send ``request`` and its payload, read the full reply, close."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await proto.write_message(writer, request, request.request_bytes)
        reply = await proto.read_header(reader)
        if (reply.kind, reply.chain, reply.hop, reply.reply_bytes) != (
            proto.REPLY, request.chain, request.hop, request.reply_bytes
        ):
            raise proto.ProtocolError(f"reply does not match request: {reply}")
        await proto.read_payload(reader, reply.reply_bytes)
    finally:
        writer.close()


class Driver:
    """Start chains per ``DriverConfig``, write JSONL records, build the summary."""

    def __init__(self, plan: dict, config: DriverConfig, hops: IO[str], chains: IO[str]) -> None:
        self.plan = plan
        self.config = config
        self._hops = hops
        self._chains = chains
        self._rng = random.Random(config.seed)
        self._arrivals = random.Random(config.seed + 1)
        self._templates = plan["chains"]
        self._weights = [t["weight"] for t in self._templates]
        self._tasks: set[asyncio.Task] = set()
        self._next_id = 0
        self._deadline = float("inf")
        self._stopping = False
        self.interrupted = False
        self.skipped = 0
        self.chain_lat: list[float] = []
        self.hop_lat: list[float] = []
        self.hops_failed = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self.per_template: dict[str, list[float]] = {t["name"]: [] for t in self._templates}
        self.failed_template: Counter[str] = Counter()
        self._gates: dict[str, asyncio.Event] = {}  # a service's hops may go when set
        self.redirects = 0

    def redirect(self, services: dict, held: Iterable[str] = ()) -> None:
        """From now on a service's hops go to its addresses in ``services``; those of a
        ``held`` service wait until a later call releases it. Hops in flight go on."""
        held = set(held)
        for name, addresses in services.items():
            if name in self.plan["services"]:
                self.plan["services"][name] = [tuple(a) for a in addresses]
        for name in self.plan["services"]:
            gate = self._gates.setdefault(name, asyncio.Event())
            if name in held:
                gate.clear()
            else:
                gate.set()
        self.redirects += 1

    def interrupt(self) -> None:
        """Stop starting chains and cancel the ones in flight."""
        self._stopping = True
        self.interrupted = True
        for task in list(self._tasks):
            task.cancel()

    def _may_start(self) -> bool:
        if self._stopping or time.monotonic() >= self._deadline:
            return False
        return self.config.chains is None or self._next_id < self.config.chains

    def _new_chain(self) -> tuple[int, dict]:
        chain_id = self._next_id
        self._next_id += 1
        return chain_id, self._rng.choices(self._templates, self._weights)[0]

    async def run(self) -> dict:
        """Run to completion (or interruption) and return the summary dict."""
        began = time.monotonic()
        if self.config.duration is not None:
            self._deadline = began + self.config.duration
        if self.config.rate:
            mains = [self._spawn(self._open_loop())]
        else:
            mains = [self._spawn(self._worker()) for _ in range(self.config.concurrency)]
        for result in await asyncio.gather(*mains, return_exceptions=True):
            if isinstance(result, Exception):  # a bug, not a network error: surface it
                raise result
        return self._summary(time.monotonic() - began)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _worker(self) -> None:
        while self._may_start():
            await self._chain(*self._new_chain())

    async def _open_loop(self) -> None:
        children: set[asyncio.Task] = set()
        next_at = time.monotonic()
        try:
            while True:
                next_at += self._arrivals.expovariate(self.config.rate)
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                if not self._may_start():
                    break
                if len(children) >= self.config.concurrency:
                    self.skipped += 1
                    self._next_id += 1  # ids stay dense in arrival order
                    continue
                child = self._spawn(self._chain(*self._new_chain()))
                children.add(child)
                child.add_done_callback(children.discard)
            await asyncio.gather(*children, return_exceptions=True)
        except asyncio.CancelledError:
            for child in children:
                child.cancel()
            await asyncio.gather(*children, return_exceptions=True)
            raise

    async def _chain(self, chain_id: int, template: dict) -> None:
        start = time.time()
        t0 = time.perf_counter()
        hop_sum = 0.0
        done = 0
        error: str | None = None
        try:
            for hop, step in enumerate(template["steps"]):
                latency, error = await self._hop(chain_id, template["name"], hop, step)
                hop_sum += latency
                if error is not None:
                    break
                done += 1
        except asyncio.CancelledError:
            error = "interrupted"
            raise
        finally:
            ok = error is None
            if ok:
                latency_ms = (time.perf_counter() - t0) * 1e3
                self.chain_lat.append(latency_ms)
                self.per_template[template["name"]].append(latency_ms)
            else:
                self.failed += 1
                self.failed_template[template["name"]] += 1
            end = time.time()
            self._write(self._chains, {
                "chain": chain_id, "template": template["name"], "start": start, "end": end,
                "steps": len(template["steps"]), "hops_done": done, "ok": ok, "error": error,
                "latency_ms": round((time.perf_counter() - t0) * 1e3, 3),
                "hop_sum_ms": round(hop_sum, 3),
            })

    async def _hop(
        self, chain_id: int, name: str, hop: int, step: dict
    ) -> tuple[float, str | None]:
        request = proto.Header(
            proto.REQUEST, hop, chain_id, step["request"], step["reply"], step["service_us"]
        )
        start = time.time()
        t0 = time.perf_counter()
        held_ms = await self._held(step["service"])
        addresses = self.plan["services"][step["service"]]
        preferred = chain_id % len(addresses)
        error: str | None = None
        plane, tried = preferred, []
        t_send = time.perf_counter()
        try:
            if self.config.multipath:
                plane, tried, error = await self._multipath(addresses, preferred, request,
                                                             t_send)
            else:
                tried = [preferred]
                async with asyncio.timeout(self.config.timeout_ms / 1e3):
                    await exchange(*addresses[preferred], request)
        except asyncio.CancelledError:
            error = "interrupted"
            raise
        except (OSError, asyncio.IncompleteReadError, proto.ProtocolError) as exc:
            error = error_text(exc)
        finally:
            latency = (time.perf_counter() - t0) * 1e3
            if error is None:
                self.hop_lat.append(latency)
            else:
                self.hops_failed += 1
                self.errors[error] += 1
            host, port = addresses[plane]
            record = {
                "chain": chain_id, "template": name, "hop": hop, "service": step["service"],
                "address": f"{host}:{port}", "plane": plane, "start": start,
                "latency_ms": round(latency, 3), "request": step["request"],
                "reply": step["reply"], "service_us": step["service_us"],
                "ok": error is None, "error": error, "preferred": preferred, "tried": tried,
            }
            if held_ms:
                record["held_ms"] = round(held_ms, 3)
            self._write(self._hops, record)
        return latency, error

    async def _held(self, service: str) -> float:
        """Wait while ``service`` is held (at most the hop time-out); the ms waited."""
        gate = self._gates.get(service)
        if gate is None or gate.is_set():
            return 0.0
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.timeout_ms / 1e3):
                await gate.wait()
        except TimeoutError:
            pass  # not released in time: the hop goes where the plan says now
        return (time.perf_counter() - t0) * 1e3

    async def _multipath(self, addresses: list, preferred: int, request: proto.Header,
                         t0: float) -> tuple[int, list[int], str | None]:
        """Try the planes in order: skip one without carrier, give each ``attempt_ms``
        (the last one what is left of the hop's time-out). Returns (plane used, planes
        tried, error of the last attempt or None)."""
        ifaces = self.config.multipath
        order = plane_order(preferred, len(addresses))
        live = [p for p in order if p >= len(ifaces) or carrier(ifaces[p])] or order
        tried: list[int] = []
        error: str | None = "no plane"
        for i, plane in enumerate(live):
            left = self.config.timeout_ms / 1e3 - (time.perf_counter() - t0)
            if left <= 0:
                error = "timeout"
                break
            budget = left if i == len(live) - 1 else min(left, self.config.attempt_ms / 1e3)
            tried.append(plane)
            try:
                async with asyncio.timeout(budget):
                    await exchange(*addresses[plane], request)
                return plane, tried, None
            except (OSError, asyncio.IncompleteReadError, proto.ProtocolError) as exc:
                error = error_text(exc)
        return (tried[-1] if tried else preferred), tried, error

    @staticmethod
    def _write(stream: IO[str], record: dict) -> None:
        stream.write(json.dumps(record, separators=(",", ":")) + "\n")

    def _summary(self, elapsed: float) -> dict:
        cfg = self.config
        hop = summary(self.hop_lat, (50, 99))
        if hop is not None:
            hop.pop("max")
        tcp_ecn = read_tcp_ecn()
        return {
            "chains_started": len(self.chain_lat) + self.failed,
            "chains_completed": len(self.chain_lat),
            "chains_failed": self.failed,
            "chains_skipped": self.skipped,
            "latency_ms": summary(self.chain_lat),
            "hop_latency_ms": hop,
            "hops_ok": len(self.hop_lat),
            "hops_failed": self.hops_failed,
            "errors": dict(self.errors),
            "templates": {
                name: {
                    "completed": len(lat),
                    "failed": self.failed_template[name],
                    "latency_ms": summary(lat),
                }
                for name, lat in self.per_template.items()
            },
            "interrupted": self.interrupted,
            "elapsed_s": round(elapsed, 3),
            "config": {
                "duration": cfg.duration, "chains": cfg.chains, "concurrency": cfg.concurrency,
                "rate": cfg.rate, "seed": cfg.seed, "timeout_ms": cfg.timeout_ms,
            },
            "ecn": {"requested": cfg.ecn, "tcp_ecn": tcp_ecn, "effective": tcp_ecn == 1},
        }
