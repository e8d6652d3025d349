"""Congestion control on real switches: telemetry, adaptive moves, CE marking, spraying.

Two fabrics (1 plane, 4 nodes, 2 leaves, 2 spines, 20 Mb/s links) with controller ECN
marking: one in ``adaptive`` mode, one in ``spray`` mode. Traffic is UDP from
:mod:`udp_tools` (beside this file).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from controllers import ecn
from controllers.telemetry import port_table
from testbed.host.files import read_jsonl
from testbed.host.procs import Helper, wait_for
from testbed.reports.telemetry import port_samples

from .conftest import small_fabric

pytestmark = [pytest.mark.ovs, pytest.mark.vm]

TOOLS = str(Path(__file__).with_name("udp_tools.py"))
RED_MBPS = 5
ROCE = 4791
ECT0, NOT_ECT = 2, 0
CONTROLLER = {
    "mode": "adaptive",
    "telemetry_ms": 100,
    "adaptive": {"interval_ms": 100, "imbalance": 0.2, "elephant_mbps": 1.0},
    "ecn": {"mode": "controller",
            "classes": {"collective": {"min_kb": 10, "max_kb": 30, "probability": 0.5},
                        "agents": {"min_kb": 10, "max_kb": 30, "probability": 0.5}}},
}


def _fabric(tmp_path_factory, controller: dict, link_mbps: float = 20):
    """A 1-plane, 20 Mb/s fabric whose controller runs with ``controller``; ``.out`` is
    its folder."""
    with small_fabric(tmp_path_factory, controller["mode"], controller=controller,
                      planes=1, link_mbps=link_mbps) as (live, _):
        yield live


@pytest.fixture(scope="module")
def congestion_live(tmp_path_factory):
    yield from _fabric(tmp_path_factory, {**CONTROLLER, "prometheus_port": "auto"})


@pytest.fixture(scope="module")
def spray_live(tmp_path_factory):
    yield from _fabric(tmp_path_factory, {**CONTROLLER, "mode": "spray"})


#: a receiver counts until :func:`result` stops it, at most this long
RECEIVE_MAX_S = 60
#: what a receiver still gets after its senders ended: the frames their queues held, and
#: those of a userspace switch that stalled for most of a second (the fixed windows this
#: replaces left about a second after the senders' end)
DRAIN_S = 1.0


@dataclass
class Receiver:
    """A receiver that counts until :func:`result` stops it, so that its count covers its
    senders however late they started (a loaded machine, or the lab VM's emulation,
    can start a Python sender seconds after it was spawned: a receiver with a window of
    its own then closed before most of their datagrams came)."""

    helper: Helper


def receiver(live, host, port: int) -> Receiver:
    proc = live.fabric.spawn(host, f"recv{port}", [sys.executable, TOOLS, "recv", "--port",
                                                   str(port), "--seconds", str(RECEIVE_MAX_S)],
                             pid_dir=live.pid_dir, stdout_pipe=True)
    assert proc.proc.stdout.readline().strip() == b"ready"
    return Receiver(proc)


def results(*procs: Helper | Receiver) -> list[dict]:
    """The JSON line each helper prints at its end: a sender's once it is done; a
    receiver's once stopped here, :data:`DRAIN_S` after this is called (once for all of
    them: call it once their senders ended)."""
    if any(isinstance(p, Receiver) for p in procs):
        time.sleep(DRAIN_S)
    helpers = [p.helper if isinstance(p, Receiver) else p for p in procs]
    for p, helper in zip(procs, helpers, strict=True):
        if isinstance(p, Receiver):
            helper.proc.send_signal(signal.SIGTERM)
    out = []
    for helper in helpers:
        line = next((ln for ln in helper.proc.stdout if ln.startswith(b"{")), b"")
        helper.stop()
        assert line, f"{helper.name}: no result line"
        out.append(json.loads(line))
    return out


def result(proc: Helper | Receiver) -> dict:
    """:func:`results` of one helper."""
    return results(proc)[0]


def started(proc: Helper) -> None:
    """Wait until a sender sends (its ``sending`` line)."""
    assert proc.proc.stdout.readline().strip() == b"sending"


def sender(live, host, dst: str, port: int, *, mbps: float, seconds: float, tos: int = 0,
           sports: int = 1, first_sport: int = 0, name: str = "send", size: int = 8000):
    return live.fabric.spawn(host, name, [
        sys.executable, TOOLS, "send", "--dst", dst, "--port", str(port), "--mbps", str(mbps),
        "--seconds", str(seconds), "--tos", str(tos), "--sports", str(sports),
        "--first-sport", str(first_sport), "--size", str(size)], pid_dir=live.pid_dir,
        stdout_pipe=True)


def port_tx(switch: str) -> dict[int, tuple[int, int]]:
    """(tx_packets, tx_bytes) per OpenFlow port, from the switch itself."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", switch],
                         capture_output=True, text=True, check=True).stdout
    ports, current = {}, None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("port"):
            name = line.split(":")[0].split()[1]
            current = int(name) if name.isdigit() else None
        elif line.startswith("tx") and current is not None:
            fields = dict(kv.split("=") for kv in line[3:].replace(" ", "").split(",")
                          if "=" in kv)
            ports[current] = (int(fields["pkts"]), int(fields["bytes"]))
    return ports


def events(live, name: str) -> list[dict]:
    return [e for e in read_jsonl(live.status) if e.get("event") == name]


def test_ce_marks_appear_when_the_queue_builds_and_not_when_it_is_empty(congestion_live):
    live = congestion_live
    spec = live.spec
    h0, h2, h3 = spec.hosts[0], spec.hosts[2], spec.hosts[3]
    dst = h3.interface(0, 0)
    # 1. no queue: one ECT sender at a fifth of the link rate. A stalled ovs-vswitchd
    # (a loaded machine) can still release a burst that queues: then, and only then,
    # marking is allowed, and only after the controller measured that queue
    t_idle = time.time()
    rx = receiver(live, h3.name, ROCE)
    tx = sender(live, h0.name, dst.ip, ROCE, mbps=4, seconds=3, tos=ECT0)
    tx.wait(10)
    idle = result(rx)
    assert idle["packets"] > 100 and idle["ect0"] + idle["ce"] == idle["packets"]
    idle_on = [e for e in events(live, "ecn_on") if e["t"] >= t_idle]
    assert all(e["backlog_bytes"] >= 10_000 for e in idle_on)
    assert idle["ce"] == 0 or idle_on, idle
    # 2. a queue: two ECT senders and one not-ECT sender into h3's 20 Mb/s downlink
    rx_ect = receiver(live, h3.name, ROCE)
    rx_plain = receiver(live, h3.name, ROCE + 1)
    senders = [sender(live, h0.name, dst.ip, ROCE, mbps=12, seconds=5, tos=ECT0, name="a"),
               sender(live, h2.name, dst.ip, ROCE, mbps=12, seconds=5, tos=ECT0, name="b"),
               # 1,000-byte frames: 1,250 of them, so a congested run still brings more
               # than 50 (with 8,000-byte frames, 156 sent and once only 48 arrived)
               sender(live, h2.name, dst.ip, ROCE + 1, mbps=2, seconds=5, tos=NOT_ECT,
                      name="c", size=1000)]
    for s in senders:
        s.wait(15)
    busy, plain = results(rx_ect, rx_plain)
    assert busy["ce"] > 0.05 * busy["packets"], busy
    assert busy["ce"] / busy["packets"] > idle["ce"] / idle["packets"]
    assert plain["packets"] > 50 and plain["ce"] == 0 and plain["not_ect"] == plain["packets"]
    congested = f"{dst.switch}e{dst.switch_port}"
    on = [e for e in events(live, "ecn_on") if e["ifname"] == congested]
    assert on and all(e["backlog_bytes"] >= 10_000 for e in on)
    # 3. the queue drains: marking stops (hysteresis ends below min_kb)
    assert wait_for(lambda: len([e for e in events(live, "ecn_off")
                                 if e["ifname"] == congested]) >= len(on), 5)
    flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", dst.switch],
                           capture_output=True, text=True, check=True).stdout
    assert f"priority={ecn.PRIORITY_MARK}," not in flows  # the marking rules are gone
    # the telemetry saw that queue, and exports it for Prometheus on 127.0.0.1
    peak = max(s["backlog_bytes"] for s in port_samples(live.out / "telemetry.jsonl")
               if s["ifname"] == congested)
    assert peak > 10_000
    # on a port the kernel chose, which the bring-up learned from the controller
    assert live.metrics_url.startswith("http://127.0.0.1:")
    url = live.metrics_url
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    assert f'testbed_port_backlog_bytes{{switch="{dst.switch}",port="{dst.switch_port}"' in text
    assert text.count("testbed_port_utilisation{") == len(port_table(spec))


@pytest.fixture(scope="module")
def red_live(tmp_path_factory):
    from testbed.host.capabilities import probe
    from testbed.host.naming import new_run_id

    if not probe(new_run_id()).red:
        pytest.skip("the kernel has no RED qdisc (sch_red): switch-side ECN marking needs it")
    # 5 Mb/s links: the emulated lab VM, the one host with RED here, forwards about 20 Mb/s
    # in all, so the offered load (1.6 times the port's rate) must stay below that
    yield from _fabric(tmp_path_factory, {"mode": "ecmp", "ecn": {
        "mode": "switch", "classes": CONTROLLER["ecn"]["classes"]}}, link_mbps=RED_MBPS)


def test_switch_queues_mark_ce_with_red_where_the_kernel_has_it(red_live):
    live = red_live
    spec = live.spec
    h0, h2, h3 = spec.hosts[0], spec.hosts[2], spec.hosts[3]
    dst = h3.interface(0, 0)
    port = f"{dst.switch}e{dst.switch_port}"
    qdiscs = subprocess.run(["tc", "qdisc", "show", "dev", port], capture_output=True,
                            text=True, check=True).stdout
    assert " red " in qdiscs and "ecn" in qdiscs
    rx = receiver(live, h3.name, ROCE)
    senders = [sender(live, h.name, dst.ip, ROCE, mbps=0.8 * RED_MBPS, seconds=5, tos=ECT0,
                      name=f"r{i}") for i, h in enumerate((h0, h2))]
    for s in senders:
        s.wait(15)
    got = result(rx)
    stats = subprocess.run(["tc", "-s", "qdisc", "show", "dev", port], capture_output=True,
                           text=True).stdout  # RED's own marked / early / pdrop counters
    assert got["ce"] > 0 and got["ce"] + got["ect0"] == got["packets"], (got, stats)
    assert events(live, "ecn_on") == []  # the switch queue marked, not the controller


def test_adaptive_moves_an_elephant_off_a_loaded_uplink(congestion_live):
    live = congestion_live
    spec = live.spec
    h0, h2, h3 = spec.hosts[0], spec.hosts[2], spec.hosts[3]
    leaf = h0.interface(0, 0).switch
    uplinks = spec.uplink_ports(leaf)
    rx2 = receiver(live, h2.name, 5001)
    rx3 = receiver(live, h3.name, 5001)
    a = sender(live, h0.name, h2.interface(0, 0).ip, 5001, mbps=7, seconds=8, name="e1")
    b = sender(live, h0.name, h3.interface(0, 0).ip, 5001, mbps=7, seconds=8, name="e2")
    started(a)
    started(b)
    placed = lambda: [e for e in events(live, "flow_placed")  # noqa: E731
                      if e["switch"] == leaf and e["flow"].endswith(":5001")]
    assert wait_for(lambda: len(placed()) >= 2, 5), events(live, "flow_placed")
    # the controller's own rebalancing first (both may be placed on one uplink at once,
    # before telemetry shows either; it moves one about a telemetry period later, once a
    # second): a move of its own made while the collision below goes in is undone by it,
    # and taken for the answer to it (seen in a run: the move came 0.5 s after placement,
    # the collision at that time, and the idle uplink carried 48 KB in the next second)
    def settled() -> bool:
        moves = [m["t"] for m in events(live, "flow_moved") if m["switch"] == leaf]
        return time.time() - max([*moves, placed()[-1]["t"]]) > 1.5
    assert wait_for(settled, 8), events(live, "flow_moved")
    # a bad hash: put both elephants on the first uplink, behind the controller's back,
    # both rules in one ovs-ofctl call (with one call each, the lab VM's controller moved
    # a flow between the two calls). The clock starts before the call: the controller can
    # move a flow as soon as the rules are in, before the call has returned (seen in CI:
    # a clock started after it missed the move). A move that the call undid instead
    # (made before the rules went in) is caught below: then the idle uplink stays idle.
    rules = []
    for e in placed()[-2:]:
        src, dst = e["flow"].split()[1].split(">")  # "udp 10.0.0.1:40000>10.0.0.3:5001"
        (sip, sport), (dip, dport) = src.split(":"), dst.split(":")
        rules.append(f"priority=200,udp,nw_src={sip},nw_dst={dip},tp_src={sport},"
                     f"tp_dst={dport},actions=output:{uplinks[0]}")
    t_collide = time.time()
    subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--strict", "mod-flows", leaf, "-"],
                   input="\n".join(rules) + "\n", text=True, check=True)
    assert wait_for(lambda: any(m["t"] > t_collide for m in events(live, "flow_moved")), 3), [
        e for e in read_jsonl(live.status) if e.get("t", 0) > t_collide - 2
        and e.get("event") not in ("port_stats",)][-40:]
    move = [m for m in events(live, "flow_moved") if m["t"] > t_collide][-1]
    assert (move["switch"], move["from_port"], move["to_port"]) == (leaf, uplinks[0],
                                                                       uplinks[1])
    assert move["t"] - t_collide < 1.0  # within a few telemetry intervals
    before = port_tx(leaf)
    time.sleep(1.0)
    after = port_tx(leaf)
    moved_bytes = after[uplinks[1]][1] - before[uplinks[1]][1]
    assert moved_bytes > 0.5 * 7e6 / 8  # the idle uplink now carries an elephant
    for s in (a, b):
        s.wait(15)
    got2, got3 = results(rx2, rx3)
    for got in (got2, got3):  # 7+7 Mb/s fit one 20 Mb/s uplink: nothing lost either way
        assert got["packets"] > 0.9 * 7e6 * 8 / (8000 * 8)


def test_spray_spreads_one_rotating_stream_over_every_uplink(spray_live):
    """Rotating the RoCE source port per packet spreads one stream over both uplinks
    (even ECN-capable packets, which take the marking groups); the same stream from one
    source port stays on one uplink."""
    live = spray_live
    spec = live.spec
    h0, h3 = spec.hosts[0], spec.hosts[3]
    leaf = h0.interface(0, 0).switch
    uplinks = spec.uplink_ports(leaf)
    spread = {}
    for sports in (64, 1):
        rx = receiver(live, h3.name, ROCE)
        before = port_tx(leaf)
        tx = sender(live, h0.name, h3.interface(0, 0).ip, ROCE, mbps=10, seconds=2,
                    sports=sports, tos=ECT0 if sports == 64 else NOT_ECT)
        tx.wait(10)
        got = result(rx)
        after = port_tx(leaf)
        spread[sports] = [after[p][0] - before[p][0] for p in uplinks]
        assert got["packets"] > 200
    total = sum(spread[64])
    assert all(n > 0.25 * total / len(uplinks) for n in spread[64]), spread
    assert sorted(spread[1])[0] < 0.05 * sum(spread[1]), spread


def _force(leaf: str, flow: str, port: int) -> None:
    """Rewrite a placed flow's rule (``flow`` as in the events) to ``port``: a bad hash."""
    proto, tuple_ = flow.split()
    src, dst = tuple_.split(">")
    (sip, sport), (dip, dport) = src.split(":"), dst.split(":")
    subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--strict", "mod-flows", leaf,
                    f"priority=200,{proto},nw_src={sip},nw_dst={dip},tp_src={sport},"
                    f"tp_dst={dport},actions=output:{port}"], check=True)


def test_a_moved_tcp_flow_runs_at_full_rate_after_the_move(congestion_live):
    """Two TCP elephants from two hosts of one leaf, forced onto one uplink, share it;
    the controller moves one and both then run near their NIC's rate (none collapses)."""
    live = congestion_live
    spec = live.spec
    h0, h1, h2, h3 = spec.hosts
    leaf = h0.interface(0, 0).switch
    uplinks = spec.uplink_ports(leaf)
    servers = [live.fabric.spawn(h.name, f"iperf-s{h.name}", ["iperf3", "-s", "-1"],
                                 pid_dir=live.pid_dir) for h in (h2, h3)]
    for h in (h2, h3):
        assert wait_for(lambda: "LISTEN" in live.fabric.run(  # noqa: B023
            h.name, ["ss", "-ltn", "sport = :5201"]).stdout, 5)  # noqa: B023
    # 12 s: the placement may take 6 s and the move 3 more (under the lab VM's
    # emulation), and the rates are judged from 1.5 s after the move
    t_start = time.time()
    clients = [live.fabric.spawn(src.name, f"iperf-c{src.name}",
                                 ["iperf3", "-c", dst.interface(0, 0).ip, "-t", "12", "-J",
                                  "-i", "0.5"], pid_dir=live.pid_dir, stdout_pipe=True)
               for src, dst in ((h0, h2), (h1, h3))]
    data = {}  # source ip -> the data connection (the last one placed to port 5201)

    def placed() -> bool:
        for e in events(live, "flow_placed"):
            if e["t"] > t_start and e["switch"] == leaf and e["flow"].endswith(":5201"):
                data[e["flow"].split()[1].split(":")[0]] = e["flow"]
        return len(data) == 2 and time.time() - t_start > 2

    assert wait_for(placed, 6)
    # the clock starts before the first flow is forced: under emulation the controller
    # moved one while the other was still being forced (then nothing was left to move)
    t_collide = time.time()
    for flow in data.values():
        _force(leaf, flow, uplinks[0])
    assert wait_for(lambda: any(m["t"] > t_collide for m in events(live, "flow_moved")), 3), [
        e for e in read_jsonl(live.status) if e.get("t", 0) > t_collide - 2
        and e.get("event") not in ("port_stats",)][-40:]
    move = next(m for m in events(live, "flow_moved") if m["t"] > t_collide)
    assert move["flow"] in data.values() and move["to_port"] == uplinks[1]
    reports = [json.loads(c.proc.stdout.read()) for c in clients]
    for c in clients:
        c.stop()
    for s in servers:
        s.stop()
    for report in reports:
        t0 = report["start"]["timestamp"]["timesecs"]
        after = [i["sum"]["bits_per_second"] / 1e6 for i in report["intervals"]
                 if t0 + i["sum"]["start"] >= move["t"] + 1.5]
        assert after and sum(after) / len(after) > 0.7 * spec.link_mbps, after


def test_a_congested_uplink_marks_the_packets_pinned_to_it(spray_live):
    """Two RoCE streams whose source ports share their low bit take the same uplink of
    the leaf (28 Mb/s into 20): that uplink marks CE through its marking group; the
    receivers' own host ports are not congested (14 Mb/s each)."""
    live = spray_live
    spec = live.spec
    h0, h1, h2, h3 = spec.hosts
    leaf = h0.interface(0, 0).switch
    t0 = time.time()
    rxs = [receiver(live, h.name, ROCE) for h in (h2, h3)]
    txs = [sender(live, src.name, dst.interface(0, 0).ip, ROCE, mbps=14, seconds=5,
                  tos=ECT0, first_sport=40000 + 2 * i, name=f"u{i}")
           for i, (src, dst) in enumerate(((h0, h2), (h1, h3)))]
    for s in txs:
        s.wait(15)
    got = results(*rxs)
    assert all(g["ce"] > 0.05 * g["packets"] for g in got), got
    marking = [(e["switch"], e["role"]) for e in events(live, "ecn_on") if e["t"] > t0]
    # the uplink is where the queue builds first (ports behind it see only the bursts
    # of a busy ovs-vswitchd)
    assert marking and marking[0] == (leaf, "leaf_uplink"), marking


def test_a_placed_flow_survives_the_death_of_its_uplink(congestion_live):
    """Adaptive rules pin a flow to one uplink; when that uplink dies the flow takes
    another in the datapath (active-backup bundle), not a black hole until the rule idles
    out, which it never would while the flow keeps sending."""
    from testbed.faults.fabric import FabricFaults

    live = congestion_live
    spec = live.spec
    h0, h2 = spec.hosts[0], spec.hosts[2]
    leaf = h0.interface(0, 0).switch
    rx = receiver(live, h2.name, 5007)
    t_start = time.time()
    tx = sender(live, h0.name, h2.interface(0, 0).ip, 5007, mbps=4, seconds=6, name="pin")
    started(tx)
    placed = lambda: [e for e in events(live, "flow_placed")  # noqa: E731
                      if e["t"] > t_start and e["switch"] == leaf
                      and e["flow"].endswith(":5007")]
    assert wait_for(placed, 5), events(live, "flow_placed")
    port = placed()[0]["port"]
    rule = subprocess.run(["timeout", "10", "ovs-ofctl", "-O", "OpenFlow13", "dump-flows",
                           leaf, "udp,tp_dst=5007"], capture_output=True, text=True).stdout
    assert f"bundle(symmetric_l3l4+udp,0,active_backup,ofport,members:{port}," in rule, rule
    link = next(lk for lk in spec.links if lk.kind == "fabric" and lk.a == leaf
                and lk.a_port == port)
    target = link.a_intf  # a link is named by either end's interface, too
    with ExitStack() as stack:
        act = FabricFaults(live, stack).actions()
        time.sleep(1.0)
        act["link_down"](target)
        try:
            time.sleep(3.0)  # half the flow's life on the other uplink
        finally:
            act["link_up"](target)
    sent = result(tx)["sent"]
    got = result(rx)["packets"]
    # a black hole would lose the 3 s (half the packets); the switch-over costs a few
    assert got > 0.9 * sent, (got, sent)
