"""Controller-side congestion logic without a switch: placement, moves, ECN, telemetry."""

from __future__ import annotations

import json
import random

import pytest

from controllers import ecn
from controllers.adaptive import FlowKey, FlowLoad, FlowRates, least_loaded, plan_move
from controllers.config import ControllerConfig, EcnClass
from controllers.paths import plan_switch
from controllers.telemetry import PortCounters, make_sample, port_table, utilisation
from testbed.host.netlink import Queue
from topologies.leafspine import build_fabric


@pytest.fixture
def spec():
    return build_fabric(prefix="tbu0", nodes=4, leaves_per_plane=2, spines_per_plane=2,
                        link_mbps=20)


def key(i: int, proto: int = 6) -> FlowKey:
    return FlowKey(proto, "10.0.0.1", "10.0.0.3", 40000 + i, 5201)


# -- placement and moves -------------------------------------------------------------
def test_new_flows_alternate_over_idle_uplinks():
    placed: dict[int, int] = {}
    chosen = []
    for _ in range(4):
        port = least_loaded({3: 0.0, 4: 0.0}, placed)
        placed[port] = placed.get(port, 0) + 1
        chosen.append(port)
    assert chosen == [3, 4, 3, 4]


def test_new_flow_avoids_the_loaded_uplink_even_with_fewer_flows():
    assert least_loaded({3: 0.8, 4: 0.3, 5: 0.6}, {4: 3}) == 4


def test_two_colliding_elephants_one_moves_within_two_intervals():
    """Synthetic telemetry: two 9 Mb/s flows on uplink 3 of a 20 Mb/s leaf, 4 idle."""
    rates = FlowRates()
    moved = None
    for tick in range(1, 4):  # flow stats every 100 ms; the first reading has no rate
        t = 0.1 * tick
        nbytes = int(9e6 / 8 * t)
        loads = rates.update([(key(1), 3, nbytes, t), (key(2), 3, nbytes, t)])
        moved = plan_move({3: 0.9, 4: 0.0}, loads, link_mbps=20, imbalance=0.2,
                          elephant_mbps=1.0)
        if moved:
            break
    assert moved is not None and tick == 2
    assert (moved.from_port, moved.to_port) == (3, 4)
    assert moved.key in (key(1), key(2))


def test_no_move_when_balanced_or_only_mice_or_frozen():
    flows = [FlowLoad(key(1), 3, 9.0), FlowLoad(key(2), 4, 9.0)]
    assert plan_move({3: 0.45, 4: 0.45}, flows, link_mbps=20, imbalance=0.2,
                     elephant_mbps=1) is None
    mice = [FlowLoad(key(i), 3, 0.5) for i in range(10)]
    assert plan_move({3: 0.25, 4: 0.0}, mice, link_mbps=20, imbalance=0.2,
                     elephant_mbps=1) is None
    hot = [FlowLoad(key(1), 3, 9.0)]
    assert plan_move({3: 0.9, 4: 0.0}, hot, link_mbps=20, imbalance=0.2, elephant_mbps=1,
                     frozen=frozenset({key(1)})) is None


def test_a_move_that_would_only_swap_the_imbalance_is_refused():
    """One 18 Mb/s flow alone on a 20 Mb/s uplink: moving it just moves the hot spot."""
    flows = [FlowLoad(key(1), 3, 18.0)]
    assert plan_move({3: 0.9, 4: 0.0}, flows, link_mbps=20, imbalance=0.2,
                     elephant_mbps=1) is None


def test_the_move_that_balances_best_is_chosen():
    flows = [FlowLoad(key(1), 3, 2.0), FlowLoad(key(2), 3, 6.0), FlowLoad(key(3), 3, 10.0)]
    move = plan_move({3: 0.9, 4: 0.3}, flows, link_mbps=20, imbalance=0.2, elephant_mbps=1)
    assert move.key == key(2)  # 0.9-0.3 = 0.6: moving 0.3 evens them out


def test_flow_rates_forget_expired_rules():
    rates = FlowRates()
    rates.update([(key(1), 3, 0, 1.0), (key(2), 4, 0, 1.0)])
    loads = rates.update([(key(2), 4, 125_000, 2.0)])
    assert [(f.key, f.mbps) for f in loads] == [(key(2), 1.0)]


# -- ECN decisions and plans ---------------------------------------------------------
def test_marking_hysteresis_follows_a_queue_that_builds_and_drains():
    th = EcnClass(min_kb=20, max_kb=60, probability=0.1)
    state = ecn.MarkState()
    never = lambda: 1.0  # noqa: E731 (the random draw never falls under p)
    trace = [0, 10_000, 30_000, 59_000, 64_000, 50_000, 25_000, 20_000, 19_000, 5_000, 30_000]
    on = []
    for b in trace:
        state.update(b, th, never)
        on.append(state.on)
    assert on == [False, False, False, False, True, True, True, True, False, False, False]


def test_marking_between_thresholds_is_red_like_in_time_slices():
    th = EcnClass(min_kb=20, max_kb=60, probability=0.5)
    rng = random.Random(7)
    hits = 0
    for _ in range(4000):
        state = ecn.MarkState()
        state.update(40_000, th, rng.random)  # halfway: p = 0.5 * 0.5
        hits += state.on
    assert 0.2 < hits / 4000 < 0.3


def test_marking_rules_only_touch_ect_packets_of_the_class(spec):
    spine = plan_switch(spec, spec.switch("tbu0p0s0").dpid)
    rules = ecn.mark_rules(spine, 2, "collective")
    assert rules and all(r["ip_ecn"] in (1, 2) for r in rules)
    assert all(r["ip_proto"] == 17 and r["udp_dst"] == 4791 for r in rules)
    dests = {r["ipv4_dst"] for r in rules}
    assert dests == {r.ip for r in spine.routes if r.port == 2}


def test_ect_steering_covers_every_remote_destination_and_class(spec):
    leaf = plan_switch(spec, spec.switch("tbu0p0l0").dpid)
    remote = {r.ip for r in leaf.routes if r.group is not None}
    rules = [m for m, ports in ecn.ect_rules(leaf) if ports == leaf.groups[1]]
    assert len(rules) == len(remote) * 2 * 2
    assert {m["ipv4_dst"] for m in rules} == remote
    assert {m["ip_proto"] for m in rules} == {6, 17}
    assert all(m["ip_ecn"] in (1, 2) for m in rules)


# -- telemetry -----------------------------------------------------------------------
def test_port_table_covers_every_switch_port_once(spec):
    table = port_table(spec)
    assert len(table) == sum(2 if lk.kind == "fabric" else 1 for lk in spec.links)
    assert {p.role for p in table.values()} == {"leaf_uplink", "spine_downlink",
                                                 "leaf_downlink"}
    assert all(p.ifname == f"{p.switch}e{p.port}" for p in table.values())


def test_sample_joins_counters_and_queue(spec):
    info = next(p for p in port_table(spec).values() if p.role == "leaf_uplink")
    prev = PortCounters(1000, 0, 1, 0, 10.0)
    now = PortCounters(1000 + 250_000, 0, 30, 2, 10.2)
    s = make_sample(5.0, info, prev, now, Queue(backlog_bytes=18_028, drops=3))
    line = json.loads(s.to_json())
    assert line["util"] == 0.5 and line["backlog_bytes"] == 18_028 and line["qdisc_drops"] == 3
    assert set(line) == {"t", "switch", "port", "ifname", "role", "tx_bytes", "rx_bytes",
                         "tx_packets", "tx_dropped", "backlog_bytes", "qdisc_drops", "util"}
    assert utilisation(prev, PortCounters(0, 0, 0, 0, 10.3), 20) == 0.0  # counter reset


def test_summary_and_report_section(tmp_path):
    from testbed.reports.telemetry import section, summarize

    vdir = tmp_path / "variants" / "adaptive"
    vdir.mkdir(parents=True)
    rows = []
    for i in range(10):
        for port, util, backlog in ((3, 0.9, 40_000), (4, 0.1 * (i % 2), 0)):
            rows.append({"t": 100 + i * 0.1, "switch": "l0", "port": port,
                         "ifname": f"l0e{port}", "role": "leaf_uplink", "tx_bytes": i,
                         "rx_bytes": 0, "tx_packets": i, "tx_dropped": 0,
                         "backlog_bytes": backlog, "qdisc_drops": i if port == 3 else 0,
                         "util": util})
    (vdir / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (vdir / "controller-events.jsonl").write_text(json.dumps({"event": "flow_moved"}) + "\n")
    s = summarize(vdir / "telemetry.jsonl")
    up = s["roles"]["leaf_uplink"]
    assert s["samples"] == 10 and s["interval_ms"] == 100.0
    assert up["peak_backlog_bytes"] == 40_000 and up["qdisc_drops"] == 9
    assert s["uplink_imbalance"]["max"] == 0.9
    text, pngs = section(vdir, "adaptive")
    assert "1 elephant moves" in text and pngs == ["variants/adaptive/telemetry.png"]
    assert (vdir / "telemetry.png").stat().st_size > 0
    assert summarize(tmp_path / "missing.jsonl") == {"samples": 0}


# -- configuration -------------------------------------------------------------------
def test_config_defaults_and_auto_ecn():
    cfg = ControllerConfig.from_dict({"mode": "spray", "ecn": {"mode": "auto"}})
    assert cfg.mode == "spray" and cfg.telemetry_ms == 100 and cfg.controller_marks
    cfg = ControllerConfig.from_dict({"ecn": {"mode": "auto"}, "ecn_backend": "switch"})
    assert not cfg.controller_marks


def test_switch_ecn_without_red_is_refused_before_anything_starts(spec, tmp_path):
    from testbed.errors import BringUpError
    from testbed.fabric.bringup import controller_config
    from testbed.host.capabilities import Capabilities

    caps = Capabilities(kernel="x", ovs_kernel_datapath=False, netem=False, htb=True,
                        red=False, fq_codel=False, macsec=False, nftables=True)
    with pytest.raises(BringUpError, match="controller.ecn.mode"):
        controller_config({"mode": "ecmp", "ecn": {"mode": "switch"}}, spec, caps, out=tmp_path)
    auto = {"ecn": {"mode": "auto"}}
    assert controller_config(auto, spec, caps, out=tmp_path)["ecn_backend"] == "controller"
    caps.red = True
    assert controller_config(auto, spec, caps, out=tmp_path)["ecn_backend"] == "switch"


def test_red_queue_line(spec):
    from testbed.fabric.net import Fabric

    fabric = Fabric(spec, caps=None, run_id="0000", controller_port=1,
                    red={"min_kb": 20, "max_kb": 60, "probability": 0.1})
    argv = fabric.red_argv("tbu0p0l0e3", 20)
    assert argv[-1] == "ecn" and "red" in argv
    assert argv[argv.index("min") + 1] == "20000" and argv[argv.index("max") + 1] == "60000"


# -- OpenFlow side (os-ken's parser, no switch) --------------------------------------
def test_flow_key_from_a_frame_and_back_through_a_match():
    from os_ken.ofproto import ofproto_v1_3_parser as parser
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether

    from controllers.congestion_app import LEARN_BYTES, flow_key, flow_match, key_of_match

    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.3", tos=2) /
                  UDP(sport=49152, dport=4791) / (b"x" * 100))
    k = flow_key(frame[:LEARN_BYTES])
    assert k == FlowKey(17, "10.0.0.1", "10.0.0.3", 49152, 4791)
    assert key_of_match(flow_match(parser, k)) == k
    tcp_key = flow_key(bytes(Ether() / IP(src="10.0.0.2", dst="10.0.0.4") / TCP(sport=1)))
    assert key_of_match(flow_match(parser, tcp_key)) == tcp_key
    assert flow_key(bytes(Ether() / IP() / b"icmp?")) is None


def test_flow_rates_survive_counters_pushed_in_steps():
    """Readings every 100 ms of counters the datapath pushes about every 0.6 s."""
    rates = FlowRates()
    seen = []
    for tick in range(1, 40):
        t = 0.1 * tick
        pushed_at = (int(t / 0.6)) * 0.6  # the counters as of the last push
        loads = rates.update([(key(1), 3, int(9e6 / 8 * pushed_at), t)])
        seen.append(loads[0].mbps)
    steady = seen[12:]
    assert all(7.0 < r < 11.5 for r in steady), steady


def test_a_lone_flow_whose_rate_lags_is_not_moved():
    """A TCP flow that grew into its uplink after a move still shows its old rate; the
    uplink's load says it is alone there, so moving it would only carry the hot spot."""
    flows = [FlowLoad(key(1), 3, 6.5), FlowLoad(key(2), 4, 9.0)]
    assert plan_move({3: 0.92, 4: 0.48}, flows, link_mbps=20, imbalance=0.2,
                     elephant_mbps=1) is None


def test_qdisc_dump_parser_reads_what_pyroute2_encodes():
    """The hand parser against pyroute2's encoder: root qdiscs only, backlog and drops,
    bytes and packets sent."""
    import struct

    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from testbed.host.netlink import RTM_NEWQDISC, TC_H_ROOT, Queue, parse_qdisc_dump

    def qdisc(index: int, parent: int, backlog: int, drops: int) -> bytes:
        m = tcmsg()
        m["header"]["type"] = RTM_NEWQDISC
        m["index"], m["parent"], m["handle"] = index, parent, 0x10000
        m["attrs"] = [("TCA_KIND", "htb"), ("TCA_STATS2", {"attrs": [
            ("TCA_STATS_BASIC", {"bytes": 5, "packets": 1}),
            ("TCA_STATS_QUEUE", {"qlen": 1, "backlog": backlog, "drops": drops,
                                 "requeues": 0, "overlimits": 3})]})]
        m.encode()
        return bytes(m.data)

    done = struct.pack("=IHHIIi", 20, 3, 2, 1, 0, 0)  # NLMSG_DONE
    data = qdisc(5, TC_H_ROOT, 18_028, 7) + qdisc(5, 0x100010, 99, 9) + qdisc(6, TC_H_ROOT,
                                                                               0, 0)
    assert parse_qdisc_dump(data) == ({5: Queue(18_028, 7, 5, 1, 1), 6: Queue(0, 0, 5, 1, 1)},
                                      False)
    assert parse_qdisc_dump(data + done)[1] is True


def test_place_tcp_off_learns_udp_only():
    from controllers.adaptive import learn_matches

    cfg = ControllerConfig.from_dict({"mode": "adaptive", "adaptive": {"place_tcp": False}})
    assert not cfg.adaptive.place_tcp
    assert [m["ip_proto"] for m in learn_matches("10.0.0.3", tcp=False)] == [17]
    syn = learn_matches("10.0.0.3")[0]
    assert syn["ip_proto"] == 6 and syn["tcp_flags"] == (0x02, 0x12)  # SYN set, ACK clear


def test_the_controller_reads_the_model_the_scenario_validates(spec, tmp_path):
    """One model: the scenario's controller section is the controller's own
    (controllers/schema.py), controller.json is validated with it at bring-up (a wrong
    value is refused there, naming the field, before any process starts) and read back
    with it in the controller."""
    from controllers.schema import Controller
    from testbed.errors import BringUpError
    from testbed.experiments.fabric import schema as fabric_schema
    from testbed.fabric.bringup import controller_config
    from testbed.host.capabilities import Capabilities

    assert fabric_schema.Controller is Controller and issubclass(ControllerConfig, Controller)
    caps = Capabilities(kernel="x", ovs_kernel_datapath=False, netem=False, htb=True,
                        red=False, fq_codel=False, macsec=False, nftables=True)
    with pytest.raises(BringUpError, match=r"^controller\.adaptive\.imbalance: "):
        controller_config({"mode": "adaptive", "adaptive": {"imbalance": 99}}, spec, caps,
                          out=tmp_path)
    data = controller_config({"mode": "adaptive", "telemetry_ms": 50}, spec, caps,
                             out=tmp_path)
    assert data["adaptive"]["interval_ms"] == 100 and data["ecn"]["classes"]["agents"] == \
        {"min_kb": 20, "max_kb": 60, "probability": 0.1}
    cfg = ControllerConfig.from_json(_write(tmp_path / "c.json", data))
    assert (cfg.mode, cfg.telemetry_ms, cfg.ecn.classes.collective.min_bytes) == \
        ("adaptive", 50, 20000)


def _write(path, data):
    import json

    path.write_text(json.dumps(data))
    return path
