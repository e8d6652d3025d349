"""Traffic classes and PFC without a fabric: the scenario rules, the port's tc lines, and
the PFC frame against Scapy's independent encoding (MACControlClassBasedFlowControl)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.scenario import load, parse
from testbed.errors import ConfigError
from testbed.fabric import qos
from testbed.fabric.pfc import parse_pfc, pfc_frame, quanta

REPO = Path(__file__).resolve().parents[2]
LOSSLESS = REPO / "scenarios" / "lossless.yaml"


def scenario(qos_section: dict) -> dict:
    data = yaml.safe_load(LOSSLESS.read_text())
    data["variants"] = [{"name": "x", "qos": qos_section}]
    return data


CLASSES = [{"name": "roce", "dscp": [26], "priority": 3, "lossless": True, "buffer_kb": 320},
           {"name": "rest"}]


@pytest.mark.parametrize(("section", "field", "words"), [
    ({"classes": "gold"}, "variants[0].qos.classes", "fifo"),
    ({"classes": [{"name": "a", "dscp": [64]}, {"name": "b"}]},
     "variants[0].qos.classes[0].dscp[0]", "63"),
    ({"classes": [{"name": "a", "dscp": [26]}, {"name": "b", "dscp": [26]}, {"name": "c"}]},
     "variants[0].qos.classes[1].dscp", "already class 'a'"),
    ({"classes": [{"name": "a", "dscp": [26]}]}, "variants[0].qos.classes", "default class"),
    ({"classes": [{"name": "a", "dscp": [1], "strict": True, "lossless": True}, {"name": "b"}]},
     "variants[0].qos.classes[0].lossless", "strict"),
    ({"classes": "fifo", "pfc": {"enabled": True}}, "variants[0].qos.pfc.enabled", "lossless"),
    ({"classes": CLASSES, "pfc": {"enabled": True, "xoff_kb": 20, "xon_kb": 30}},
     "variants[0].qos.pfc.xon_kb", "below xoff_kb"),
    ({"classes": [{**CLASSES[0], "buffer_kb": 64}, CLASSES[1]], "pfc": {"enabled": True}},
     "variants[0].qos.classes[0].buffer_kb", "headroom"),
    ({"classes": "roce", "pfc": {"enabled": True, "colour": 1}},
     "variants[0].qos.pfc.colour", "unknown"),
])
def test_bad_qos_is_named(section, field, words):
    with pytest.raises(ConfigError) as err:
        parse(scenario(section))
    assert err.value.field == field
    assert words in str(err.value)


def test_headroom_counts_every_port_that_feeds_a_queue():
    """On the 4:1 fabric a leaf uplink is fed by four 20 Mb/s host ports: 80 Mb/s."""
    variant = load(LOSSLESS).variants[2]
    spec = variant.fabric("tb0000")
    feed = qos.fan_in(spec)
    # a leaf downlink has the most feeders: two uplinks and three other downlinks
    assert (feed.mbps, feed.ports, feed.fastest_mbps, feed.peers) == (80, 5, 20, False)
    room = qos.headroom_bytes(qos.Pfc(reaction_ms=20), feed, 9000)
    assert room == 200_000 + 5 * 2 * 9018  # and per feeding port a burst and a frame


def test_feeders_follow_up_down_routing():
    ports = [("l", "up0", "leaf_uplink"), ("l", "up1", "leaf_uplink"),
             ("l", "d0", "leaf_downlink"), ("l", "d1", "leaf_downlink")]
    feeds = qos.feeders(ports)
    assert feeds["up0"] == {"d0", "d1"}  # nothing comes down and goes up again
    assert feeds["d0"] == {"up0", "up1", "d1"}


def test_roce_profile_tc_lines():
    planned = qos.plan(qos.ROCE, 20, 9000)
    lines = qos.tc_lines("swp1", 20, 9000, planned)
    assert lines[0] == "qdisc add dev swp1 root handle 1: htb default 12"
    assert any("classid 1:10 htb rate 1000kbit ceil 20mbit" in ln and "prio 0" in ln
               for ln in lines)  # CNPs: strict, 5 % guaranteed
    assert "qdisc add dev swp1 parent 1:11 handle 11: tbf rate 20mbit burst 9018 " \
           "limit 320000" in lines
    assert ("filter add dev swp1 parent 1: protocol ip prio 2 u32 match ip dsfield 0x68 0xfc "
            "flowid 1:11") in lines
    assert any("protocol 0x88b5" in ln and "flowid 1:ff" in ln for ln in lines)
    assert sum(p.rate_kbit for p in planned) == 20_000
    # every class's ceiling bucket as deep as its rate's (tc's default is one small frame:
    # a late timer would cost the port its rate)
    classes = [ln for ln in lines if ln.startswith("class add") and "ceil 20mbit" in ln]
    assert classes and all("burst 9018 cburst 9018 " in ln + " " for ln in classes)


def test_tc_lines_are_accepted_by_tc():
    """The batch parses (tc's own checker, no device needed beyond a dummy in a netns)."""
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    ns = f"tbq{os.getpid() % 10000:04d}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "swp1", "type", "veth", "peer", "name",
                        "swp2"], check=True)
        lines = qos.tc_lines("swp1", 20, 9000, qos.plan(qos.ROCE, 20, 9000))
        done = subprocess.run(["ip", "netns", "exec", ns, "tc", "-batch", "-"],
                              input="\n".join(lines) + "\n", capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_pfc_frame_matches_scapy():
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    from scapy.layers.l2 import Ether

    mac = bytes.fromhex("020000000001")
    ours = pfc_frame(mac, {3: 0x1234, 6: 0})
    ref = bytes(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:01", type=0x8808)
                / MACControlClassBasedFlowControl(c3_enabled=1, c6_enabled=1,
                                                  c3_pause_time=0x1234, c6_pause_time=0))
    assert ours[:len(ref)] == ref[:len(ours)]
    assert parse_pfc(ref.ljust(60, b"\0")) == {3: 0x1234, 6: 0}
    assert parse_pfc(bytes(60)) is None


def test_pause_quanta_scale_with_the_link():
    assert quanta(0.1, 20) == 3906  # 100 ms at 20 Mb/s, 512 bit times a quantum
    assert quanta(10, 100_000) == 0xFFFF


def test_validate_cli_exits_2_on_bad_qos(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(scenario({"classes": CLASSES,
                                            "pfc": {"enabled": True, "xon_kb": 99}})))
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "validate", str(bad)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "qos.pfc.xon_kb" in done.stderr


def test_a_storm_needs_pfc():
    data = scenario({"classes": "roce"})
    data["faults"] = [{"at_s": 1, "action": "pfc_storm", "target": "n3p0r0"}]
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert err.value.field == "faults" and "qos.pfc.enabled" in str(err.value)
    data["qos"] = {"classes": "roce", "pfc": {"enabled": True}}
    parse(data)


def test_qos_figure_and_entry_from_records(tmp_path):
    """The agent's records as it writes them: the figure, and the summary entry."""
    from testbed.core import layout
    from testbed.reports import qos as qos_plot

    lines = [{"classes": ["cnp", "roce", "lossy"], "fields": ["bytes", "drops", "backlog"]}]
    for t in range(20):
        lines.append({"t": t / 10, "ports": {
            "tbx1p0l0e5": [[0, 0, 0], [t * 1000, 0, 4000 * (t % 5)], [0, 0, 100]],
            "tbx1p0s0e1": [None, [0, 0, 2000], [0, 0, 0]]}})
    (tmp_path / layout.CLASS_TELEMETRY).write_text("".join(json.dumps(x) + "\n" for x in lines))
    events = [{"t": 0.3, "port": "tbx1n0p0r0", "priority": 3, "state": "paused"},
              {"t": 0.5, "port": "tbx1n1p0r0", "priority": 3, "state": "paused"},
              {"t": 0.9, "port": "tbx1n0p0r0", "priority": 3, "state": "running"}]
    (tmp_path / layout.PFC_EVENTS).write_text("".join(json.dumps(e) + "\n" for e in events))
    classes, times, series = qos_plot.class_backlog(tmp_path / layout.CLASS_TELEMETRY)
    assert classes == ["cnp", "roce", "lossy"] and len(times) == 20
    assert series["roce"][4] == 18.0  # 16 KB + 2 KB over two ports
    assert qos_plot.paused_ports(tmp_path / layout.PFC_EVENTS) == ([0.0, 0.3, 0.5, 0.9],
                                                                    [0, 1, 2, 1])
    png = qos_plot.plot(tmp_path, "pfc")
    assert png and png.stat().st_size > 5000
    record = {"ports": {
        "tbx1p0l0e5": {"switch": "tbx1p0l0", "frames_rx": 0, "frames_tx": 3, "xoff_tx": 2,
                       "xon_tx": 1, "classes": {"roce": {"bytes": 10, "drops": 0,
                                                         "peak_backlog_bytes": 9000,
                                                         "paused_s": 0.0, "pauses": 0,
                                                         "watchdog_events": 0}}},
        "tbx1n0p0r0": {"switch": None, "frames_rx": 2, "frames_tx": 0, "xoff_tx": 0,
                       "xon_tx": 0, "classes": {"roce": {"paused_s": 0.6, "pauses": 1,
                                                         "watchdog_events": 0}}}},
        "reaction": {k: {"n": 1, "p50": 1.0, "p99": 2.0, "max": 3.0}
                     for k in ("poll_gap_ms", "frame_transit_ms", "apply_ms")}}
    entry = qos.qos_entry(record, {"classes": "roce", "pfc": {"enabled": True}},
                          {"tbx1p0l0e5": "leaf_uplink"})
    assert entry["per_class"] == {"roce": {"bytes": 10, "drops": 0, "peak_backlog_bytes": 9000}}
    assert entry["pfc_frames"] == {"xoff_tx": 2, "xon_tx": 1, "rx": 2}
    assert entry["most_paused"] == [{"port": "tbx1n0p0r0", "role": "host_nic", "paused_s": 0.6}]
    assert entry["reaction_p99_sum_ms"] == 6.0 and entry["storm"] is None


class _Wire:
    """A fake port socket: what was sent, and a netlink ack for every request."""

    def __init__(self):
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def recv(self, _size: int) -> bytes:
        return bytes(16) + bytes(4)  # nlmsghdr + error 0


def _agent(tmp_path, backlog: dict):
    """An agent over one leaf (uplink up, downlinks d0 and d1 to hosts h0, h1) whose
    queues read ``backlog`` (port -> bytes of the lossless class)."""
    from testbed.fabric.pfc import Agent, ClassState, Port
    from testbed.host.netlink import Queue

    class Reader:
        def read_leaves(self):
            return {(p, 0x11): Queue(b, 0) for p, b in backlog.items()}

    def open_port(dev):
        port = Port(dev["ifname"], None, 20.0, dev["switch"], dev["peer"], _Wire(), _Wire(),
                    _Wire(), _Wire(), 1, bytes(6))
        port.classes = {3: ClassState()}
        for state in ("paused", "running", "dropping"):
            port.messages[(3, state)] = state.encode()
        return port

    ports = [{"ifname": n, "switch": "l", "role": r, "peer": f"x{n}", "mbps": 20}
             for n, r in (("up", "leaf_uplink"), ("d0", "leaf_downlink"),
                          ("d1", "leaf_downlink"))]
    ports += [{"ifname": h, "switch": None, "role": "host_nic", "peer": p, "mbps": 20}
              for h, p in (("h0", "d0"), ("h1", "d1"))]
    cfg = {"pfc": True, "poll_ms": 2, "pause_ms": 100, "watchdog_ms": 200, "restore_ms": 500,
           "mtu": 9000, "xoff": 24000, "xon": 8000, "ports": ports,
           "switches": {"l": ["up", "d0", "d1"]},
           "classes": [{"name": "roce", "minor": 0x11, "priority": 3, "lossless": True,
                        "limit": 320000}],
           "events": str(tmp_path / "events.jsonl"), "samples": str(tmp_path / "s.jsonl"),
           "storm_dir": str(tmp_path / "storm")}
    return Agent(cfg, open_port=open_port, reader=Reader())


def _pauses(agent, port: str) -> list[int]:
    from testbed.fabric.pfc import parse_pfc

    return [parse_pfc(f)[3] for f in agent.ports[port].tx.sent if parse_pfc(f)]


def test_pfc_agent_pauses_the_feeders_of_a_hot_queue_and_resumes_them(tmp_path):
    backlog = {"up": 0, "d0": 30000, "d1": 0}
    agent = _agent(tmp_path, backlog)
    agent.poll(1.0)  # d0 over XOFF: its feeders (the uplink and d1) get XOFF
    assert _pauses(agent, "up") == [3906] and _pauses(agent, "d1") == [3906]
    assert _pauses(agent, "d0") == []
    backlog["d0"] = 12000  # between XON and XOFF: still hot, nothing new
    agent.poll(1.01)
    assert len(_pauses(agent, "up")) == 1
    agent.poll(1.06)  # half the pause time later: refreshed
    assert len(_pauses(agent, "up")) == 2
    backlog["d0"] = 5000  # below XON: XON to both
    agent.poll(1.07)
    assert _pauses(agent, "up")[-1] == 0 and _pauses(agent, "d1")[-1] == 0
    backlog["up"] = 40000  # an uplink is fed by the downlinks alone
    agent.poll(1.1)
    assert _pauses(agent, "d0")[-1] > 0 and _pauses(agent, "d1")[-1] > 0
    assert _pauses(agent, "up")[-1] == 0


def test_pfc_agent_reaction_point_and_watchdog(tmp_path):
    from testbed.fabric.pfc import pfc_frame

    agent = _agent(tmp_path, {})
    h0 = agent.ports["h0"]
    frames = [pfc_frame(bytes(6), {3: 3906})]

    class Rx:
        def recvfrom(self, _n):
            if frames:
                return frames.pop(), ("h0", 0, 0)
            raise BlockingIOError

    h0.rx = Rx()
    agent.receive(h0)
    st = h0.classes[3]
    assert st.since is not None and h0.netlink.sent[-1] == b"paused"
    # a refresh before it expires keeps it paused; the watchdog drops after 200 ms
    agent.timers(st.since + 0.05)
    assert st.since is not None
    st.paused_until = st.since + 10
    agent.timers(st.since + 0.25)
    assert st.since is None and st.watchdog_events == 1
    assert h0.netlink.sent[-1] == b"dropping"
    frames.append(pfc_frame(bytes(6), {3: 3906}))  # ignored in drop mode
    agent.receive(h0)
    assert st.since is None
    agent.timers(st.drop_until + 0.01)
    assert h0.netlink.sent[-1] == b"running" and st.drop_until == 0.0
