"""The dashboard's charts, defined once: the page draws each series from the monitor's
points (``field``, a second each), and Grafana from Prometheus (``promql``, the same
quantity from the exported metrics; :mod:`testbed.monitor.grafana`). Where the two
estimate differently, the series says how (``note``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Series:
    label: str
    field: str  # the monitor's point (testbed.monitor.fabric)
    promql: str  # the same from Prometheus
    colour: str
    scale: float = 1.0  # the page shows field x scale
    note: str = ""


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    unit: str  # Grafana's unit name
    series: tuple[Series, ...]


#: a rate's window: a few scrapes (one a second), short enough to follow a burst
WINDOW = "10s"

FABRIC = (
    Panel("chains", "agent chains: latency (ms)", "ms", (
        Series("p50", "chain_p50_ms", "histogram_quantile(0.5, sum by (le) (rate("
               f"testbed_chain_latency_seconds_bucket[{WINDOW}]))) * 1000", "#1e88e5",
               note="page: the chains that ended in the second; Grafana: the histogram's "
                    f"buckets over {WINDOW}"),
        Series("p99", "chain_p99_ms", "histogram_quantile(0.99, sum by (le) (rate("
               f"testbed_chain_latency_seconds_bucket[{WINDOW}]))) * 1000", "#c62828"))),
    Panel("training", "training: slowest rank's last iteration (ms)", "ms", (
        Series("iteration", "iteration_ms",
               "max(testbed_training_last_iteration_seconds) * 1000", "#6a1b9a"),)),
    Panel("fabric", "fabric: busiest uplink (%) and all queued (KB)", "short", (
        Series("busiest uplink %", "uplink_util_max",
               'max(testbed_port_utilization{role=~".*uplink"}) * 100', "#ef6c00",
               scale=100),
        Series("queued KB", "backlog_kb", "sum(testbed_port_queue_backlog_bytes) / 1000",
               "#00897b"))),
    Panel("marks", "per second: PFC pauses, ECN marks received", "ops", (
        Series("pauses", "pauses",
               f"sum(rate(testbed_pfc_pauses_received_total[{WINDOW}]))", "#c62828"),
        Series("CE marks", "ce_marks",
               f"sum(rate(testbed_training_ce_received_total[{WINDOW}]))", "#1565c0"))),
)


#: where the lab has the storage scenario's caches: the retriever's reads
STORAGE = (
    Panel("storage", "storage: the retriever's reads served by the node cache (%)", "percent", (
        Series("hit ratio", "storage_hit_ratio",
               f'100 * sum(rate(testbed_storage_reads_total{{outcome="hit"}}[{WINDOW}])) / '
               f'sum(rate(testbed_storage_reads_total{{outcome=~"hit|miss"}}[{WINDOW}]))',
               "#2e7d32", scale=100,
               note="page: the reads of the second; Grafana: over the window"),)),
)

BACKBONE = (
    Panel("links", "backbone: busiest link (%) and links down", "short", (
        Series("busiest link %", "link_util_max", "max(testbed_link_utilization) * 100",
               "#ef6c00", scale=100),
        Series("links down", "links_down", "sum(1 - testbed_link_up)", "#c62828"))),
    Panel("transit", "regions: traffic into the backbone (Mb/s)", "Mbits", (
        Series("all regions", "transit_mbps", "sum(rate(testbed_region_transit_bytes_total"
               f'{{direction="out"}}[{WINDOW}])) * 8 / 1e6', "#1e88e5"),)),
    Panel("routing", "routing: adjacencies and sessions", "short", (
        Series("OSPF Full", "ospf_full", "sum(testbed_ospf_neighbors_full)", "#2e7d32"),
        Series("BGP Established", "bgp_established",
               "sum(testbed_bgp_sessions_established)", "#6a1b9a"),
        Series("BFD up", "bfd_up", "sum(testbed_bfd_sessions_up)", "#00897b"))),
)


def as_json(panels: tuple[Panel, ...]) -> list[dict]:
    """The panels as the page reads them (``/api/topology``)."""
    return [asdict(p) for p in panels]
