"""A lab's samples as Prometheus metrics: a collector that prometheus_client asks at
every scrape, so what Prometheus stores is the monitor's latest sample, nothing older.

Labels use the spec's names: ``switch``, ``port`` (the OpenFlow port number),
``ifname``, ``plane``, ``tier``, ``role``, ``link``, ``direction`` (``ab``: from the link's
lower end, the host or the lower tier, to its upper end), ``class``, ``priority``,
``tenant`` (an agent chain's tenant, or its template where chains have no tenant),
``rank``. Counters count from the lab's start.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

PORT_LABELS = ["switch", "port", "ifname", "plane", "tier", "role"]
#: per-port metrics: (name, kind, help, the sample's key)
PORT_METRICS = (
    ("testbed_port_transmit_bytes", "counter", "bytes the switch port sent", "tx_bytes"),
    ("testbed_port_receive_bytes", "counter", "bytes the switch port received", "rx_bytes"),
    ("testbed_port_transmit_packets", "counter", "packets the switch port sent", "tx_packets"),
    ("testbed_port_receive_packets", "counter", "packets the switch port received",
     "rx_packets"),
    ("testbed_port_transmit_drops", "counter", "packets the port's interface dropped on "
     "sending", "tx_dropped"),
    ("testbed_port_receive_drops", "counter", "packets the port's interface dropped on "
     "receiving", "rx_dropped"),
    ("testbed_port_queue_drops", "counter", "packets the port's egress queue dropped",
     "queue_drops"),
    ("testbed_port_queue_backlog_bytes", "gauge", "bytes waiting in the port's egress queue",
     "backlog_bytes"),
    ("testbed_port_utilization", "gauge", "the port's sending rate over its link's rate, "
     "last second", "util"),
    ("testbed_port_up", "gauge", "1 while the port is up with carrier", "up"),
)


def _family(name: str, kind: str, doc: str, labels: list[str]) -> Metric:
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(name.removesuffix("_total"), doc, labels=labels)


class FabricCollector:
    """prometheus_client collector over a :class:`testbed.monitor.fabric.FabricWatch`."""

    def __init__(self, watch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        w = self.watch
        latest = w.latest
        for name, kind, doc, key in PORT_METRICS:
            family = _family(name, kind, doc, PORT_LABELS)
            for ifname, sample in latest["ports"].items():
                p = w.ports[ifname]
                family.add_metric([p.switch, str(p.port), ifname[len(w.spec.prefix):],
                                   str(p.plane), str(p.tier), p.role], float(sample[key]))
            yield family
        util = GaugeMetricFamily("testbed_link_utilization", "the link's rate over its "
                                 "capacity, last second, each way", labels=[
                                     "link", "plane", "kind", "direction"])
        up = GaugeMetricFamily("testbed_link_up", "1 while both ends of the link carry",
                               labels=["link", "plane", "kind"])
        kinds = {lk["id"]: lk for lk in w.topo["links"]}
        for name, s in latest["links"].items():
            lk = kinds[name]
            for direction in ("ab", "ba"):
                util.add_metric([name, str(lk["plane"]), lk["kind"], direction], s[direction])
            up.add_metric([name, str(lk["plane"]), lk["kind"]], float(s["up"]))
        yield util
        yield up
        yield from self._classes(latest["classes"])
        yield from self._records()

    def _classes(self, classes: dict) -> Iterator[Metric]:
        labels = ["switch", "ifname", "class", "priority"]
        sent = CounterMetricFamily("testbed_class_transmit_bytes", "bytes a traffic class's "
                                   "queue sent", labels=labels)
        drops = CounterMetricFamily("testbed_class_queue_drops", "packets a traffic class's "
                                    "queue dropped", labels=labels)
        backlog = GaugeMetricFamily("testbed_class_queue_backlog_bytes", "bytes waiting in "
                                    "a traffic class's queue", labels=labels)
        prefix = len(self.watch.spec.prefix)
        for c in classes.values():
            p = self.watch.ports[c["port"]]
            values = [p.switch, c["port"][prefix:], c["class"], str(c["priority"])]
            sent.add_metric(values, c["sent_bytes"])
            drops.add_metric(values, c["drops"])
            backlog.add_metric(values, c["backlog_bytes"])
        yield from (sent, drops, backlog)

    def _records(self) -> Iterator[Metric]:
        w, prefix = self.watch, len(self.watch.spec.prefix)
        yield _filled(CounterMetricFamily, "testbed_controller_decisions", "the controller's "
                      "decisions: flows moved or placed, paths recomputed, links drained, "
                      "ECN on or off", ["decision"],
                      (([kind], n) for kind, n in sorted(w.decisions.items())))
        yield _filled(CounterMetricFamily, "testbed_pfc_pauses_received", "times a PAUSE "
                      "received stopped the port's queue of the priority",
                      ["ifname", "priority"],
                      (([port[prefix:], str(prio)], n)
                       for (port, prio), n in sorted(w.pauses_received.items())))
        yield _filled(CounterMetricFamily, "testbed_pfc_pauses_sent", "times the switch "
                      "began pausing the port's sender (XOFF) for the priority",
                      ["switch", "ifname", "priority"],
                      (([sw[prefix:], port[prefix:], str(prio)], n)
                       for (sw, port, prio), n in sorted(w.pauses_sent.items())))
        yield _filled(CounterMetricFamily, "testbed_chains", "agent chains that ended, by "
                      "outcome", ["tenant", "outcome"],
                      (([tenant, "completed" if ok else "failed"], n)
                       for (tenant, ok), n in sorted(w.chains_done.items())))
        yield _histogram("testbed_chain_latency_seconds", "an agent chain's end-to-end "
                         "latency (the sum of its hops)", w.chain_latency)
        yield _histogram("testbed_training_iteration_seconds", "a training rank's iteration "
                         "time (compute and the collective)", w.iteration)
        for cls, name, doc, by_rank in (
                (CounterMetricFamily, "testbed_training_iterations",
                 "training iterations done", w.rank_iterations),
                (CounterMetricFamily, "testbed_training_ce_received",
                 "ECN CE-marked packets a rank received", w.rank_ce),
                (CounterMetricFamily, "testbed_training_cnps_received",
                 "congestion notifications a rank received", w.rank_cnps),
                (GaugeMetricFamily, "testbed_training_last_iteration_seconds",
                 "a rank's last iteration time", w.rank_last)):
            yield _filled(cls, name, doc, ["rank"],
                          (([str(rank)], n) for rank, n in sorted(by_rank.items())))
        yield _filled(CounterMetricFamily, "testbed_storage_reads", "the storage scenario's "
                      "object reads: hit or miss of the node's cache, store (no cache), "
                      "error", ["outcome"],
                      (([outcome], n) for outcome, n in sorted(w.storage_reads.items())))


def _filled(cls, name: str, doc: str, labels: list[str], samples) -> Metric:
    """A metric family of ``cls`` with every (label values, value) of ``samples``."""
    family = cls(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def _histogram(name: str, doc: str, h) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], h.buckets(), h.sum)
    return family


def exposition(collector) -> bytes:
    """The collector's metrics in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
