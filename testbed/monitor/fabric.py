"""What a fabric lab shows, sampled once a second.

- **Ports and links**, from the kernel: every switch port is a veth end in the root
  namespace, so one netlink link dump gives every port's counters and carrier, and one
  qdisc dump its queue (backlog and drops of the shaping queue in front of the wire;
  per traffic class, the class queues, where the fabric has classes). A link's
  utilization in each direction is the sending switch port's rate over the link's rate
  (a host's sending is its switch port's receiving). These are the packets the switches
  really forwarded, whoever controls them (the lab's controller or a remote one).
- **What the lab's processes record**, read as they append it (the results folder's
  files, :mod:`testbed.core.layout`): the controller's decisions, PFC's pauses, agent
  chains, training iterations, and the faults applied by hand.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from testbed.core import layout
from testbed.host.netlink import LinkCounters, LinkReader, Queue, QueueReader
from testbed.monitor import panels
from testbed.monitor.tail import Tail, Tails
from testbed.storage.cache import FROM_CACHE
from topologies.spec import FabricSpec, link_name, short
from traffic.stats import percentiles

#: controller events that are decisions, and how the timeline words them
DECISIONS = {"flow_moved": "moved", "flow_placed": "placed", "recomputed": "recomputed",
             "drain": "drained", "ecn_on": "ECN on", "ecn_off": "ECN off",
             "port_status": "port status"}
#: the decisions drawn on the timeline (placements and ECN switching are counted only:
#: there is one per flow or per queue swing)
MARKED = ("flow_moved", "recomputed", "drain", "port_status")
#: chain latency buckets (seconds), Prometheus histogram style
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ITERATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Port:
    """A switch port as the spec places it."""

    ifname: str
    switch: str
    port: int
    role: str
    plane: int
    tier: int
    mbps: float
    link: str


class Histogram:
    """Cumulative counts per bucket, the sum and the count (Prometheus's histogram).

    >>> h = Histogram((0.1, 1.0))
    >>> for v in (0.05, 0.5, 3.0):
    ...     h.observe(v)
    >>> h.buckets(), h.count, round(h.sum, 2)
    ([('0.1', 1), ('1.0', 2), ('+Inf', 3)], 3, 3.55)
    """

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds, self.counts = bounds, [0] * len(bounds)
        self.count, self.sum = 0, 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1

    def buckets(self) -> list[tuple[str, int]]:
        return [(str(b), c) for b, c in zip(self.bounds, self.counts, strict=True)] + [
            ("+Inf", self.count)]


def ports_of(spec: FabricSpec) -> dict[str, Port]:
    """Every switch port by interface name, with the link it belongs to."""
    link_of = {}
    for lk in spec.links:
        link_of[lk.a_intf] = link_of[lk.b_intf] = link_name(spec, lk)
    out = {}
    for p in spec.switch_ports():
        sw = spec.switch(p.switch)
        out[p.ifname] = Port(p.ifname, short(spec, p.switch), p.port, p.role, sw.plane,
                             sw.tier, p.mbps, link_of[p.ifname])
    return out


def topology(spec: FabricSpec, charts: tuple = panels.FABRIC) -> dict:
    """The fabric as the page draws it: nodes (switches with tier, plane, rail; hosts)
    and links with their ends' interfaces and rates."""
    nodes = [{"id": short(spec, s.name), "type": "switch", "role": s.role, "tier": s.tier,
              "plane": s.plane, "rail": s.rail, "group": s.group, "index": s.index}
             for s in spec.switches]
    nodes += [{"id": short(spec, h.name), "type": "host", "tier": -1, "node": h.node,
               "group": h.group} for h in spec.hosts]
    links = [{"id": link_name(spec, lk), "a": short(spec, lk.a), "b": short(spec, lk.b),
              "a_intf": short(spec, lk.a_intf), "b_intf": short(spec, lk.b_intf),
              "mbps": lk.mbps, "kind": lk.kind, "plane": lk.plane} for lk in spec.links]
    ports = [{"ifname": p.ifname, "switch": short(spec, p.switch), "port": p.port,
              "role": p.role} for p in spec.switch_ports()]
    return {"kind": "fabric", "prefix": spec.prefix, "planes": spec.planes,
            "rails": spec.rails, "queue_kb": spec.queue_kb, "nodes": nodes, "links": links,
            "switch_ports": ports, "panels": panels.as_json(charts)}


class FabricWatch:
    """Samples of one fabric lab; :meth:`sample` once a second."""

    KIND = "fabric"

    def __init__(self, spec: FabricSpec, out: Path, *, links: LinkReader | None = None,
                 queues: QueueReader | None = None, storage: bool = False) -> None:
        self.spec, self.out = spec, out
        self.ports = ports_of(spec)
        self.charts = panels.FABRIC + (panels.STORAGE if storage else ())
        self.topo = topology(spec, self.charts)
        self.links = links or LinkReader()
        self.queues = queues or QueueReader(sorted(self.ports))
        self.prev: dict[str, tuple[float, LinkCounters]] = {}
        self.link_up: dict[str, bool] = {}
        pfc = self._config(out / layout.PFC_CONFIG)
        self.classes = pfc.get("classes", [])
        self.events = Tail(out / layout.CONTROLLER_EVENTS)
        self.faults = Tail(out / layout.LAB_FAULTS)
        self.pfc = Tail(out / layout.PFC_EVENTS)
        self.chains = Tail(out / layout.CHAINS)
        self.ranks = Tails(out, layout.RANK_GLOB)
        self.reads = Tail(out / layout.READS)
        # what the metrics count, from the lab's start
        self.decisions: Counter[str] = Counter()
        self.pauses_received: Counter[tuple[str, int]] = Counter()
        self.pauses_sent: Counter[tuple[str, str, int]] = Counter()
        self.chain_latency = Histogram(LATENCY_BUCKETS)
        self.chains_done: Counter[tuple[str, bool]] = Counter()
        self.iteration = Histogram(ITERATION_BUCKETS)
        self.rank_iterations: Counter[int] = Counter()
        self.rank_ce: Counter[int] = Counter()
        self.rank_cnps: Counter[int] = Counter()
        self.rank_last: dict[int, float] = {}  # each rank's last iteration (seconds)
        #: the storage scenario's reads by outcome: hit, miss (by the node's cache),
        #: store (no cache asked), error
        self.storage_reads: Counter[str] = Counter()
        if storage:
            for outcome in ("hit", "miss", "store", "error"):
                self.storage_reads[outcome] += 0
        self.training: dict | None = None
        if pfc.get("pfc"):  # every port's lossless priorities count from zero
            for name in self.ports:
                for c in self.classes:
                    if c.get("lossless"):
                        self.pauses_received[(name, c["priority"])] = 0
        self.latest: dict = {"t": 0.0, "ports": {}, "links": {}, "classes": {}}

    @staticmethod
    def _config(path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def topology(self) -> dict:
        return self.topo

    def ask(self, now: float | None = None) -> None:
        """Nothing slow to ask outside the sample (a backbone asks its routers)."""

    # -- one sample -----------------------------------------------------------------
    def sample(self, timeline, now: float | None = None) -> dict:
        """Read everything once; record the point and the events on ``timeline``;
        return the latest state (ports, links, classes)."""
        now = time.time() if now is None else now
        counters = self.links.read()
        queues = self.queues.read()
        ports = {}
        for name, p in self.ports.items():
            c = counters.get(name)
            if c is None:  # a port not there (yet, or any more)
                continue
            q = queues.get(name) or Queue(0, 0)
            tx_mbps = rx_mbps = 0.0
            last = self.prev.get(name)
            if last is not None and now > last[0]:
                dt = now - last[0]
                tx_mbps = max(0, c.tx_bytes - last[1].tx_bytes) * 8 / dt / 1e6
                rx_mbps = max(0, c.rx_bytes - last[1].rx_bytes) * 8 / dt / 1e6
            self.prev[name] = (now, c)
            ports[name] = {"tx_bytes": c.tx_bytes, "rx_bytes": c.rx_bytes,
                           "tx_packets": c.tx_packets, "rx_packets": c.rx_packets,
                           "tx_dropped": c.tx_dropped, "rx_dropped": c.rx_dropped,
                           "tx_errors": c.tx_errors, "rx_errors": c.rx_errors,
                           "backlog_bytes": q.backlog_bytes, "queue_drops": q.drops,
                           "tx_mbps": round(tx_mbps, 3), "rx_mbps": round(rx_mbps, 3),
                           "util": round(min(1.0, tx_mbps / p.mbps), 4) if p.mbps else 0.0,
                           "up": c.running}
        links = self._links(ports, timeline, now)
        classes = self._class_queues() if self.classes else {}
        point = self._records(timeline, now)
        uplinks = [ports[n]["util"] for n, p in self.ports.items()
                   if n in ports and p.role.endswith("uplink")]
        point["uplink_util_max"] = round(max(uplinks), 4) if uplinks else None
        point["backlog_kb"] = round(sum(p["backlog_bytes"] for p in ports.values()) / 1e3, 1)
        point["fabric_mbps"] = round(sum(ports[n]["tx_mbps"] for n, p in self.ports.items()
                                         if n in ports and p.role.endswith("uplink")), 2)
        timeline.add(now, point)
        self.latest = {"t": round(now, 3), "ports": ports, "links": links, "classes": classes}
        return self.latest

    def _links(self, ports: dict, timeline, now: float) -> dict:
        """Per link: utilization each way (a to b, b to a) and whether it carries."""
        out = {}
        for lk in self.spec.links:
            name = link_name(self.spec, lk)
            a, b = ports.get(lk.a_intf), ports.get(lk.b_intf)
            if b is None:
                continue
            if lk.kind == "host":  # a is the host's NIC: what it sends, b receives
                ab = min(1.0, b["rx_mbps"] / lk.mbps) if lk.mbps else 0.0
                up = b["up"]
            else:
                ab = a["util"] if a else 0.0
                up = b["up"] and (a["up"] if a else True)
            ba = b["util"]
            out[name] = {"ab": round(ab, 4), "ba": round(ba, 4), "util": round(max(ab, ba), 4),
                         "up": up}
            if self.link_up.get(name, True) != up:
                timeline.event(now, "link", f"{name} {'up' if up else 'down'}")
            self.link_up[name] = up
        return out

    def _class_queues(self) -> dict:
        leaves = self.queues.read_leaves()
        out = {}
        for name in self.ports:
            for c in self.classes:
                q = leaves.get((name, c["minor"]))
                if q is not None:
                    out[f"{name}/{c['name']}"] = {
                        "port": name, "class": c["name"], "priority": c.get("priority"),
                        "sent_bytes": q.sent_bytes, "drops": q.drops,
                        "backlog_bytes": q.backlog_bytes}
        return out

    def _records(self, timeline, now: float) -> dict:
        """The records appended since the last sample: counted, put on the timeline;
        the point's values for this second."""
        for e in self.faults.read():
            timeline.event(e.get("t", now), "fault", e.get("text", e.get("kind", "fault")))
        for e in self.events.read():
            kind = e.get("event")
            if kind in DECISIONS:
                self.decisions[kind] += 1
            if kind in MARKED:
                timeline.event(e.get("t", now), "decision", decision_text(e))
        pauses = 0
        for e in self.pfc.read():
            if e.get("state") == "paused":
                self.pauses_received[(e["port"], e.get("priority", 0))] += 1
                pauses += 1
            for port in e.get("xoff", []):
                self.pauses_sent[(e.get("switch", ""), port, e.get("priority", 0))] += 1
        latencies = []
        for c in self.chains.read():
            ok = bool(c.get("ok"))
            self.chains_done[(str(c.get("tenant", c.get("template", ""))), ok)] += 1
            if ok and c.get("latency_ms") is not None:
                latencies.append(c["latency_ms"])
                self.chain_latency.observe(c["latency_ms"] / 1000)
        if self.training is None:  # written when the traffic starts: its ranks count from 0
            self.training = self._config(self.out / layout.TRAINING_CONFIG) or None
            for rank in range(len((self.training or {}).get("ranks", []))):
                for counter in (self.rank_iterations, self.rank_ce, self.rank_cnps):
                    counter[rank] += 0
        iterations, ce = [], 0
        for r in self.ranks.read():
            if "iteration_ms" not in r:
                continue
            rank = int(r.get("rank", 0))
            self.rank_iterations[rank] += 1
            self.rank_ce[rank] += int(r.get("ce_received", 0))
            self.rank_cnps[rank] += int(r.get("cnps_received", 0))
            ce += int(r.get("ce_received", 0))
            iterations.append(r["iteration_ms"])
            self.rank_last[rank] = r["iteration_ms"] / 1000
            self.iteration.observe(r["iteration_ms"] / 1000)
        hits = misses = 0
        for r in self.reads.read():
            outcome = read_outcome(r)
            self.storage_reads[outcome] += 1
            hits, misses = hits + (outcome == "hit"), misses + (outcome == "miss")
        p50 = p99 = None
        if latencies:
            p50, p99 = (round(v, 2) for v in percentiles(latencies, (50, 99)))
        return {"chains": len(latencies), "chain_p50_ms": p50, "chain_p99_ms": p99,
                "iteration_ms": round(max(iterations), 1) if iterations else None,
                "pauses": pauses, "ce_marks": ce,
                "storage_hit_ratio": round(hits / (hits + misses), 4) if hits + misses else None}


def read_outcome(r: dict) -> str:
    """A storage read's outcome: hit or miss of the node's cache, store (read without a
    cache), error (as :func:`testbed.experiments.storage.run.read_entry` counts them).

    >>> [read_outcome(r) for r in ({"status": 200, "cache": "HIT"}, {"status": 200,
    ...  "cache": "MISS"}, {"status": 200, "cache": None}, {"status": 0, "cache": None})]
    ['hit', 'miss', 'store', 'error']
    """
    if r.get("status") != 200:
        return "error"
    if not r.get("cache"):
        return "store"
    return "hit" if r["cache"] in FROM_CACHE else "miss"


def decision_text(e: dict) -> str:
    """One line of a controller decision for the timeline.

    >>> decision_text({"event": "flow_moved", "switch": "tbx1p0l0", "from_port": 3,
    ...                "to_port": 4, "mbps": 9.5})
    'moved a flow on tbx1p0l0: port 3 -> 4 (9.5 Mb/s)'
    >>> decision_text({"event": "recomputed", "cause": "port p0l0:3 down", "switches": 4})
    'recomputed paths (port p0l0:3 down)'
    """
    kind = e.get("event")
    if kind == "flow_moved":
        return (f"moved a flow on {e.get('switch')}: port {e.get('from_port')} -> "
                f"{e.get('to_port')} ({e.get('mbps')} Mb/s)")
    if kind == "flow_placed":
        return f"placed a flow on {e.get('switch')}: port {e.get('port')}"
    if kind == "recomputed":
        return f"recomputed paths ({e.get('cause')})"
    if kind == "drain":
        return f"drained {'-'.join(e.get('link') or [])} (loss {e.get('loss')})"
    if kind in ("ecn_on", "ecn_off"):
        return f"{DECISIONS[kind]} at {e.get('ifname')} ({e.get('class')})"
    if kind == "port_status":
        return f"port {e.get('name')}:{e.get('port')} {'up' if e.get('up') else 'down'}"
    return str(kind)
