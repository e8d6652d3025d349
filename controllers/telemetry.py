"""Port telemetry: OpenFlow port counters plus the egress queue depth of every switch port.

Two sources are joined per sample. The switch reports what it sent (OpenFlow port stats:
bytes, packets, drops, with the counter's own duration, so rates do not depend on when
the reply arrived). The queue in front of the wire is not the switch's: switch ports are
shaped by HTB + a byte FIFO in the root namespace (:mod:`testbed.fabric.net`), so its depth
is read over netlink, one dump of all qdiscs per sample (the root qdisc's backlog and
drops; :class:`testbed.host.netlink.QueueReader`, the host layer's). Everything here is
pure; the os-ken app in :mod:`controllers.congestion_app` drives it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, astuple, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testbed.host.netlink import Queue
from topologies.spec import FabricSpec


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
