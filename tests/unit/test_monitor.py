"""The lab monitor without a lab: port counters and queues fed by hand (as the kernel's
netlink dumps give them), the lab's records appended to files, then what the metrics,
the page's JSON and the Grafana dashboard make of them."""

from __future__ import annotations

import json
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.host.netlink import LinkCounters, Queue
from testbed.monitor import grafana, panels
from testbed.monitor.fabric import FabricWatch
from testbed.monitor.metrics import FabricCollector, exposition
from testbed.monitor.server import MonitorServer
from testbed.monitor.timeline import Timeline
from topologies.leafspine import build_fabric

PREFIX = "tbmon0"


class Links:
    """Stands for the netlink link dump: the counters the test set."""

    def __init__(self) -> None:
        self.links: dict[str, LinkCounters] = {}

    def read(self) -> dict[str, LinkCounters]:
        return self.links


class Queues:
    """Stands for the qdisc dump: the queues the test set."""

    def __init__(self) -> None:
        self.queues: dict[str, Queue] = {}

    def read(self) -> dict[str, Queue]:
        return self.queues

    def read_leaves(self) -> dict:
        return {}


def counters(tx: int = 0, rx: int = 0, *, running: bool = True) -> LinkCounters:
    return LinkCounters(rx // 1000, tx // 1000, rx, tx, 0, 0, 0, 0, running)


@pytest.fixture
def lab(tmp_path):
    spec = build_fabric(prefix=PREFIX, nodes=4, leaves_per_plane=2, spines_per_plane=2,
                        link_mbps=10)
    links, queues = Links(), Queues()
    watch = FabricWatch(spec, tmp_path, links=links, queues=queues)
    for name in watch.ports:
        links.links[name] = counters()
    return spec, watch, links, queues, tmp_path


def append(path, *records: dict) -> None:
    with path.open("a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def test_rates_links_and_cuts_from_the_kernels_counters(lab):
    spec, watch, links, queues, _ = lab
    tl = Timeline()
    watch.sample(tl, now=100.0)
    uplink, host_port = f"{PREFIX}p0l0e3", f"{PREFIX}p0l0e1"  # leaf uplink; n0's leaf port
    links.links[uplink] = counters(tx=625_000)  # 5 Mb in one second: half of 10 Mb/s
    links.links[host_port] = counters(rx=1_250_000)  # n0 sends 10 Mb/s: its link is full
    queues.queues[uplink] = Queue(backlog_bytes=30_000, drops=4)
    state = watch.sample(tl, now=101.0)
    assert state["ports"][uplink]["util"] == 0.5
    assert state["ports"][uplink]["backlog_bytes"] == 30_000
    assert state["links"]["p0l0-p0s0"] == {"ab": 0.5, "ba": 0.0, "util": 0.5, "up": True}
    assert state["links"]["n0-p0l0"]["ab"] == 1.0  # the host's sending: its port's receiving
    point = tl.view()["points"][-1]
    assert point["uplink_util_max"] == 0.5 and point["backlog_kb"] == 30.0

    links.links[uplink] = counters(tx=625_000, running=False)  # the cable is cut
    state = watch.sample(tl, now=102.0)
    assert state["links"]["p0l0-p0s0"]["up"] is False
    assert [e["text"] for e in tl.view()["events"]] == ["p0l0-p0s0 down"]
    links.links[uplink] = counters(tx=625_000)
    watch.sample(tl, now=103.0)
    assert [e["text"] for e in tl.view(since=102.5)["events"]] == ["p0l0-p0s0 up"]


def test_the_labs_records_are_counted_and_marked(lab):
    spec, watch, links, queues, out = lab
    tl = Timeline()
    append(out / "chains.jsonl", *({"ok": True, "latency_ms": ms, "template": "rag"}
                                   for ms in (10, 20, 30, 40)),
           {"ok": False, "latency_ms": None, "template": "rag"})
    append(out / "controller-events.jsonl",
           {"t": 5.0, "event": "flow_moved", "switch": "p0l0", "from_port": 3, "to_port": 4,
            "mbps": 9.5},
           {"t": 5.1, "event": "flow_placed", "switch": "p0l0", "port": 3},
           {"t": 5.2, "event": "connected"})
    append(out / "lab-faults.jsonl", {"t": 6.0, "kind": "link_down", "text": "link_down x"})
    append(out / "pfc-events.jsonl", {"t": 1, "port": f"{PREFIX}p0l0e3", "priority": 3,
                                      "state": "paused"},
           {"t": 1, "switch": f"{PREFIX}p0s0", "priority": 3, "xoff": [f"{PREFIX}p0s0e1"]})
    (out / "training.json").write_text(json.dumps({"ranks": [{}, {}]}))
    append(out / "training-rank1.jsonl", {"rank": 1, "iteration": 0, "iteration_ms": 600.0,
                                          "ce_received": 7, "cnps_received": 2})
    watch.sample(tl, now=10.0)
    point = tl.view()["points"][-1]
    assert (point["chains"], point["chain_p50_ms"], point["iteration_ms"]) == (4, 25.0, 600.0)
    assert point["pauses"] == 1 and point["ce_marks"] == 7
    assert [(e["kind"], e["text"]) for e in tl.view()["events"]] == [
        ("fault", "link_down x"), ("decision", "moved a flow on p0l0: port 3 -> 4 (9.5 Mb/s)")]

    families = {f.name: f for f in text_string_to_metric_families(
        exposition(FabricCollector(watch)).decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    assert samples[("testbed_chains_total", (("outcome", "completed"), ("tenant", "rag")))] == 4
    assert samples[("testbed_chains_total", (("outcome", "failed"), ("tenant", "rag")))] == 1
    assert samples[("testbed_chain_latency_seconds_bucket", (("le", "0.025"),))] == 2
    assert samples[("testbed_chain_latency_seconds_count", ())] == 4
    assert samples[("testbed_controller_decisions_total", (("decision", "flow_moved"),))] == 1
    assert samples[("testbed_controller_decisions_total", (("decision", "flow_placed"),))] == 1
    assert samples[("testbed_pfc_pauses_received_total",
                    (("ifname", "p0l0e3"), ("priority", "3")))] == 1
    assert samples[("testbed_pfc_pauses_sent_total",
                    (("ifname", "p0s0e1"), ("priority", "3"), ("switch", "p0s0")))] == 1
    # both ranks count from the start, the one with no iteration yet at zero
    assert samples[("testbed_training_iterations_total", (("rank", "0"),))] == 0
    assert samples[("testbed_training_ce_received_total", (("rank", "1"),))] == 7
    assert samples[("testbed_training_last_iteration_seconds", (("rank", "1"),))] == 0.6
    port = samples[("testbed_port_up", (("ifname", "p0l0e3"), ("plane", "0"), ("port", "3"),
                                        ("role", "leaf_uplink"), ("switch", "p0l0"),
                                        ("tier", "0")))]
    assert port == 1.0
    assert families["testbed_port_transmit_bytes"].type == "counter"
    assert families["testbed_link_utilization"].type == "gauge"


def test_every_panel_series_is_a_field_the_monitor_records_and_a_grafana_query(lab):
    spec, watch, *_ = lab
    tl = Timeline()
    watch.sample(tl, now=1.0)
    point = tl.view()["points"][-1]
    board = grafana.dashboard(panels.FABRIC, "lf")
    exprs = [q for _, q in grafana.queries(board)]
    for panel in panels.FABRIC:
        for s in panel.series:
            assert s.field in point, s.field
            assert s.promql in exprs
    # every metric a query names is one the monitor exports
    text = exposition(FabricCollector(watch)).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    for expr in exprs:
        words = expr
        for c in "(){}[]":
            words = words.replace(c, " ")
        metric = next(w for w in words.split() if w.startswith("testbed_"))
        base = metric.removesuffix("_bucket").removesuffix("_total")
        assert base in names, metric


def test_grafana_provisioning_files(tmp_path):
    board = grafana.write(tmp_path, "http://127.0.0.1:9999/", "lf", panels.FABRIC)
    import yaml

    source = yaml.safe_load((tmp_path / "provisioning/datasources/testbed.yaml").read_text())
    assert source["datasources"][0]["url"] == "http://127.0.0.1:9999"
    assert source["datasources"][0]["uid"] == "testbed-lf"
    provider = yaml.safe_load((tmp_path / "provisioning/dashboards/testbed.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == str(board.parent)
    data = json.loads(board.read_text())
    assert all(p["datasource"]["uid"] == "testbed-lf" for p in data["panels"])
    assert len({p["id"] for p in data["panels"]}) == len(data["panels"])


def test_the_server_answers_only_its_own_paths(lab):
    spec, watch, *_ = lab
    tl = Timeline()
    watch.sample(tl, now=1.0)
    watch.sample(tl, now=2.0)
    server = MonitorServer(watch=watch, timeline=tl, collector=FabricCollector(watch),
                           lab={"lab": "lf"}, port=0, lock=threading.Lock())
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
        status, ctype, body = server.answer("/api/state?since=1.5")
        state = json.loads(body)
        assert status == 200 and [p["t"] for p in state["points"]] == [2.0]
        status, _, body = server.answer("/api/topology")
        topo = json.loads(body)
        assert topo["lab"] == "lf" and len(topo["links"]) == len(spec.links)
        assert [p["key"] for p in topo["panels"]] == [p.key for p in panels.FABRIC]
        assert server.answer("/metrics")[1].startswith("text/plain; version=0.0.4")
        assert server.answer("/static/vendor/cytoscape.min.js")[0] == 200
        for bad in ("/static/../server.py", "/static/../../errors.py", "/etc/passwd",
                    "/api/state?since=x"):
            assert server.answer(bad)[0] in (400, 404), bad
    finally:
        server.httpd.server_close()


def test_a_backbone_watch_counts_links_transit_routing_and_macsec(tmp_path, monkeypatch):
    from testbed.monitor import backbone

    stats = tmp_path / "stats-a.json"
    stats.write_text(json.dumps({"counters": {"InPktsOK": 40, "InPktsLate": 2,
                                              "OutPktsProtected": 50, "Other": 9}}))
    desc = {"kind": "backbone", "protocol": "ospfd", "nodes": [
        {"id": "nyc", "role": "pop", "area": "na", "pops": [], "netns": "x", "vty": "v"},
        {"id": "us-east", "role": "region", "area": None, "pops": ["nyc"], "netns": "y",
         "vty": "v"}],
        "links": [{"id": "us-east-nyc", "a": "us-east", "b": "nyc", "a_if": "l0a",
                   "b_if": "l0b", "mbps": 10, "km": 50, "kind": "access",
                   "macsec": {"a": {"backend": "userspace", "netns": "y", "tap": "t",
                                    "stats": str(stats)}}}]}
    ends = {"us-east": Links(), "nyc": Links()}
    ends["us-east"].links["l0a"] = counters(tx=0)
    ends["nyc"].links["l0b"] = counters(tx=0)
    watch = backbone.BackboneWatch(desc, tmp_path, readers=ends)
    full = iter([3, 2])  # OSPF adjacencies Full: 3, then 2 after a cut
    monkeypatch.setattr(watch, "_routing", lambda: {"nyc": {"ospf_full": next(full),
                                                            "bfd_up": 1}})
    tl = Timeline()
    watch.ask(now=100.0)
    watch.sample(tl, now=100.0)
    ends["us-east"].links["l0a"] = counters(tx=625_000, rx=1000)  # the region sends 5 Mb/s
    ends["nyc"].links["l0b"] = counters(tx=0, running=False)
    state = watch.sample(tl, now=101.0)
    assert state["links"]["us-east-nyc"]["ab"] == 0.5 and not state["links"]["us-east-nyc"]["up"]
    assert tl.view()["points"][-1]["transit_mbps"] == 5.0
    watch.ask(now=101.0)  # not due: nothing asked
    assert watch.answer is None
    watch.routing_at = 0  # now due: the routers are asked again
    watch.ask(now=102.0)
    watch.sample(tl, now=102.0)
    texts = [e["text"] for e in tl.view()["events"]]
    assert texts == ["us-east-nyc down", "nyc: ospf_full 3 -> 2"]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(
                   exposition(backbone.BackboneCollector(watch)).decode()) for s in f.samples}
    assert samples[("testbed_region_transit_bytes_total",
                    (("direction", "out"), ("region", "us-east")))] == 625_000
    assert samples[("testbed_ospf_neighbors_full", (("router", "nyc"),))] == 2
    assert samples[("testbed_macsec_packets_total", (("counter", "InPktsLate"),
                                                     ("link", "us-east-nyc"),
                                                     ("router", "us-east")))] == 2
    assert ("testbed_macsec_packets_total", (("counter", "Other"), ("link", "us-east-nyc"),
                                             ("router", "us-east"))) not in samples
    board = grafana.dashboard(panels.BACKBONE, "wan", "backbone")
    for panel in panels.BACKBONE:
        for s in panel.series:
            assert s.field in tl.view()["points"][-1]
    assert "switch port queues" not in [p["title"] for p in board["panels"]]


def test_a_storage_labs_reads_give_its_cache_hit_ratio(tmp_path):
    spec = build_fabric(prefix=PREFIX, nodes=4, leaves_per_plane=2, spines_per_plane=2)
    links, queues = Links(), Queues()
    watch = FabricWatch(spec, tmp_path, links=links, queues=queues, storage=True)
    assert [p["key"] for p in watch.topology()["panels"]][-1] == "storage"
    append(tmp_path / "reads.jsonl", *({"status": 200, "cache": c} for c in
                                       ("HIT", "HIT", "STALE", "MISS")),
           {"status": 0, "cache": None})
    tl = Timeline()
    watch.sample(tl, now=1.0)
    assert tl.view()["points"][-1]["storage_hit_ratio"] == 0.75
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(
                   exposition(FabricCollector(watch)).decode()) for s in f.samples}
    assert samples[("testbed_storage_reads_total", (("outcome", "hit"),))] == 3
    assert samples[("testbed_storage_reads_total", (("outcome", "store"),))] == 0
    assert samples[("testbed_storage_reads_total", (("outcome", "error"),))] == 1
