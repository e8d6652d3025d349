"""Port telemetry: OpenFlow port counters plus the egress queue depth of every switch port.

Two sources are joined per sample. The switch reports what it sent (OpenFlow port stats:
bytes, packets, drops, with the counter's own duration, so rates do not depend on when
the reply arrived). The queue in front of the wire is not the switch's: switch ports are
shaped by HTB + a byte FIFO in the root namespace (:mod:`testbed.fabric.net`), so its depth
is read over netlink, one dump of all qdiscs per sample (the root qdisc's backlog and
drops). Everything here is pure except :class:`QueueReader`; the os-ken app in
:mod:`controllers.congestion_app` drives it.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, astuple, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from topologies.spec import FabricSpec

TC_H_ROOT = 0xFFFFFFFF


@dataclass(frozen=True)
class PortInfo:
    """One switch port: where it is and what it leads to."""

    switch: str
    dpid: int
    port: int
    ifname: str
    role: str
    mbps: float


def port_table(spec: FabricSpec) -> dict[tuple[int, int], PortInfo]:
    """Every switch port of ``spec`` by (dpid, OpenFlow port), with its role and rate.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> table = port_table(spec)
    >>> leaf = spec.switch("tbdoc0p0l0").dpid
    >>> [(p.port, p.ifname, p.role) for (d, _), p in sorted(table.items()) if d == leaf]
    ... # doctest: +NORMALIZE_WHITESPACE
    [(1, 'tbdoc0p0l0e1', 'leaf_downlink'), (2, 'tbdoc0p0l0e2', 'leaf_downlink'),
     (3, 'tbdoc0p0l0e3', 'leaf_uplink'), (4, 'tbdoc0p0l0e4', 'leaf_uplink')]
    """
    table: dict[tuple[int, int], PortInfo] = {}
    for p in spec.switch_ports():
        dpid = spec.switch(p.switch).dpid
        table[(dpid, p.port)] = PortInfo(p.switch, dpid, p.port, p.ifname, p.role, p.mbps)
    return table


@dataclass(frozen=True)
class PortCounters:
    """One OpenFlow port-stats entry; ``duration_s`` is the counter's own clock."""

    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    tx_dropped: int
    duration_s: float


@dataclass(frozen=True)
class Queue:
    """A root qdisc's counters: what it holds and dropped, and what it sent."""

    backlog_bytes: int
    drops: int
    sent_bytes: int = 0
    sent_packets: int = 0
    backlog_packets: int = 0


@dataclass(frozen=True)
class Sample:
    """One line of telemetry.jsonl."""

    t: float
    switch: str
    port: int
    ifname: str
    role: str
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    tx_dropped: int
    backlog_bytes: int
    qdisc_drops: int
    util: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    def state(self) -> tuple:
        """Everything but the time: equal states make equal records."""
        return astuple(self)[1:]


def poll_interval_ms(telemetry_ms: float, ports: int, budget: int) -> float:
    """The telemetry interval: ``telemetry_ms``, or longer where sampling every port that
    often would exceed ``budget`` port samples a second (0: no budget), so that the
    controller's work grows no faster than the budget on large fabrics.

    >>> poll_interval_ms(100, 48, 2000), poll_interval_ms(100, 1280, 2000)
    (100, 640.0)
    >>> poll_interval_ms(100, 1280, 0)
    100
    """
    if budget <= 0:
        return telemetry_ms
    return max(telemetry_ms, 1000 * ports / budget)


class TelemetryWriter:
    """Appends the samples of one port-stats reply to ``telemetry.jsonl``, bounded: a
    port's full record only when anything but its time changed since the record last
    written for it, and the ports that did not change in one short line
    (``{"t": T, "switch": S, "same": [ports]}``), which :func:`expand` turns back into
    their records. An idle port costs a few bytes a sample instead of a 250-byte line;
    nothing is lost.
    """

    def __init__(self, path: str):
        self._file = open(path, "a")  # noqa: SIM115 (closed in close)
        self._last: dict[tuple[str, int], tuple] = {}

    def lines(self, switch: str, t: float, samples: Iterable[Sample]) -> list[str]:
        """The lines for one reply's ``samples`` (all of ``switch``, taken at ``t``)."""
        out, same = [], []
        for s in samples:
            key, state = (s.switch, s.port), s.state()
            if self._last.get(key) == state:
                same.append(s.port)
            else:
                self._last[key] = state
                out.append(s.to_json())
        if same:
            out.append(json.dumps({"t": round(t, 4), "switch": switch, "same": same},
                                  separators=(",", ":")))
        return out

    def write(self, switch: str, t: float, samples: Iterable[Sample]) -> int:
        """Write one reply's samples; returns the number of lines written."""
        lines = self.lines(switch, t, samples)
        if lines:
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()  # readers (reports, tests) may look while the run goes on
        return len(lines)

    def close(self) -> None:
        self._file.close()


def expand(records: Iterable[dict]) -> Iterator[dict]:
    """Every port sample of telemetry records (:class:`TelemetryWriter`): a ``same`` line
    stands for the listed ports' last records at its time. One pass, memory per port.

    >>> rec = {"t": 1.0, "switch": "s", "port": 3, "util": 0.0}
    >>> [(s["t"], s["port"]) for s in expand([rec, {"t": 1.1, "switch": "s", "same": [3]}])]
    [(1.0, 3), (1.1, 3)]
    """
    last: dict[tuple[str, int], dict] = {}
    for rec in records:
        same = rec.get("same")
        if same is None:
            last[(rec["switch"], rec["port"])] = rec
            yield rec
            continue
        for port in same:
            prev = last.get((rec["switch"], port))
            if prev is not None:
                yield {**prev, "t": rec["t"]}


def utilisation(prev: PortCounters | None, now: PortCounters, mbps: float) -> float:
    """Transmit rate between two counter readings over the link rate, clipped to 0..1.

    >>> a = PortCounters(0, 0, 0, 0, 1.0)
    >>> utilisation(a, PortCounters(125_000, 0, 0, 0, 1.1), 20)  # 10 Mb/s on 20 Mb/s
    0.5
    >>> utilisation(None, a, 20), utilisation(a, PortCounters(5, 0, 0, 0, 1.0), 20)
    (0.0, 0.0)
    """
    if prev is None or mbps <= 0:
        return 0.0
    dt = now.duration_s - prev.duration_s
    if dt <= 0 or now.tx_bytes < prev.tx_bytes:
        return 0.0
    rate = (now.tx_bytes - prev.tx_bytes) * 8 / dt / 1e6
    return round(min(1.0, rate / mbps), 4)


def make_sample(t: float, info: PortInfo, prev: PortCounters | None, now: PortCounters,
                queue: Queue | None) -> Sample:
    """Join one port's counters and queue into a telemetry record."""
    q = queue or Queue(0, 0)
    return Sample(t=round(t, 4), switch=info.switch, port=info.port, ifname=info.ifname,
                  role=info.role, tx_bytes=now.tx_bytes, rx_bytes=now.rx_bytes,
                  tx_packets=now.tx_packets, tx_dropped=now.tx_dropped,
                  backlog_bytes=q.backlog_bytes, qdisc_drops=q.drops,
                  util=utilisation(prev, now, info.mbps))


RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TCA_STATS2, TCA_STATS_BASIC, TCA_STATS_QUEUE = 7, 1, 3
NLMSG_HDR = struct.Struct("=IHHII")
TCMSG = struct.Struct("=BxxxiIII")
RTATTR = struct.Struct("=HH")
GNET_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
GNET_BASIC = struct.Struct("=QI")  # bytes, packets


def _attrs(data: bytes, start: int, end: int):
    """(type, payload start, payload end) of the netlink attributes in data[start:end]."""
    while start + RTATTR.size <= end:
        length, kind = RTATTR.unpack_from(data, start)
        if length < RTATTR.size:
            return
        yield kind & 0x3FFF, start + RTATTR.size, start + length
        start += (length + 3) & ~3


def parse_qdisc_dump(data: bytes, leaves: bool = False) -> tuple[dict, bool]:
    """Root-qdisc counters by interface index from RTM_NEWQDISC messages (backlog, drops,
    bytes and packets sent); and whether the dump is complete (NLMSG_DONE seen).

    ``leaves``: every other qdisc's counters instead, by (interface index, major of
    its handle), e.g. the leaf queues of traffic classes."""
    out: dict = {}
    offset, done = 0, False
    while offset + NLMSG_HDR.size <= len(data):
        length, kind, _, _, _ = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size:
            break
        end = offset + length
        if kind == NLMSG_DONE:
            done = True
        elif kind == NLMSG_ERROR:
            raise OSError("netlink error in qdisc dump")
        elif kind == RTM_NEWQDISC:
            _, index, handle, parent, _ = TCMSG.unpack_from(data, offset + NLMSG_HDR.size)
            if (parent != TC_H_ROOT) == leaves:
                body = offset + NLMSG_HDR.size + TCMSG.size
                for kind2, a, b in _attrs(data, body, end):
                    if kind2 != TCA_STATS2:
                        continue
                    sent, packets, queue = 0, 0, None
                    for kind3, c, d in _attrs(data, a, b):
                        if kind3 == TCA_STATS_QUEUE:
                            queue = GNET_QUEUE.unpack_from(data, c)
                        elif kind3 == TCA_STATS_BASIC and d - c >= GNET_BASIC.size:
                            sent, packets = GNET_BASIC.unpack_from(data, c)
                    if queue is not None:
                        key = (index, handle >> 16) if leaves else index
                        out[key] = Queue(backlog_bytes=queue[1], drops=queue[2],
                                         sent_bytes=sent, sent_packets=packets,
                                         backlog_packets=queue[0])
        offset = (end + 3) & ~3
    return out, done


class QueueReader:
    """Root-qdisc counters of the given interfaces, one netlink dump per call.

    The dump is parsed here, reading only the counters: pyroute2 parses every attribute
    of every qdisc on the host, about 30 ms for a hundred qdiscs, which at 10 samples a
    second is a third of a core (and on a 128-switch fabric, 2,600 qdiscs, most of a
    second per dump). Interface indexes are looked up by name (one ioctl each), again
    only for names not yet found (ports appear while the fabric comes up).

    ``sock``: a netlink route socket to dump through (e.g. one opened in another network
    namespace); by default one in this process's namespace.
    """

    def __init__(self, ifnames: list[str] | tuple[str, ...] = (),
                 sock: socket.socket | None = None):
        self._wanted = set(ifnames)
        self._names: dict[int, str] = {}
        if sock is None:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            sock.bind((0, 0))
        self._sock = sock
        self._sock.settimeout(2.0)
        self._seq = 0

    def _resolve(self) -> None:
        missing = self._wanted - set(self._names.values())
        for name in missing:
            try:
                self._names[socket.if_nametoindex(name)] = name
            except OSError:  # not created yet
                continue

    def dump(self, leaves: bool = False) -> dict:
        """Counters of every root qdisc in the socket's namespace, by interface index
        (``leaves``: of every other qdisc, by interface index and handle major)."""
        self._seq += 1
        request = NLMSG_HDR.pack(NLMSG_HDR.size + TCMSG.size, RTM_GETQDISC,
                                 NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0)
        self._sock.send(request + TCMSG.pack(0, 0, 0, 0, 0))
        out: dict[int, Queue] = {}
        while True:
            part, done = parse_qdisc_dump(self._sock.recv(1 << 20), leaves)
            out.update(part)
            if done:
                return out

    def read(self) -> dict[str, Queue]:
        """Counters of the wanted interfaces that exist, by name."""
        self._resolve()
        return {self._names[i]: q for i, q in self.dump().items() if i in self._names}

    def read_leaves(self) -> dict[tuple[str, int], Queue]:
        """Counters of the wanted interfaces' non-root qdiscs, by (name, handle major)."""
        self._resolve()
        return {(self._names[i], major): q for (i, major), q in self.dump(True).items()
                if i in self._names}

    def close(self) -> None:
        self._sock.close()


def prometheus_text(samples: list[Sample]) -> str:
    """The latest sample of each port in the Prometheus text format.

    >>> s = Sample(1.0, "sw", 3, "swe3", "leaf_uplink", 10, 20, 1, 0, 1500, 2, 0.5)
    >>> print(prometheus_text([s]).splitlines()[2])
    testbed_port_tx_bytes_total{switch="sw",port="3",ifname="swe3",role="leaf_uplink"} 10
    """
    metrics = (("tx_bytes_total", "counter", "tx_bytes"),
               ("rx_bytes_total", "counter", "rx_bytes"),
               ("tx_dropped_total", "counter", "tx_dropped"),
               ("qdisc_drops_total", "counter", "qdisc_drops"),
               ("backlog_bytes", "gauge", "backlog_bytes"),
               ("utilisation", "gauge", "util"))
    lines = []
    for name, kind, attr in metrics:
        lines += [f"# HELP testbed_port_{name} switch port {attr}",
                  f"# TYPE testbed_port_{name} {kind}"]
        for s in samples:
            labels = f'switch="{s.switch}",port="{s.port}",ifname="{s.ifname}",role="{s.role}"'
            lines.append(f"testbed_port_{name}{{{labels}}} {getattr(s, attr)}")
    return "\n".join(lines) + "\n"


class PrometheusExporter:
    """Serve the latest samples on 127.0.0.1:``port`` (``/metrics``) from a daemon thread;
    ``"auto"``: on a free port the kernel picks (:attr:`port` says which)."""

    def __init__(self, port: int | str):
        self.latest: dict[str, Sample] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = prometheus_text(list(exporter.latest.values())).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0 if port == "auto" else int(port)),
                                          Handler)
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def update(self, samples: list[Sample]) -> None:
        for s in samples:
            self.latest[s.ifname] = s
