"""Per-packet ECN marking by phantom queues on real switches (nftables egress hooks).

One small fabric (1 plane, 4 nodes, 2 leaves, 2 spines, 20 Mb/s links) whose switch
ports carry phantom queues draining at 0.95 x 20 Mb/s. Traffic is UDP from
:mod:`udp_tools`; the receivers read the ECN field of every datagram as it arrived
(a CE packet with a bad IP checksum would not arrive at all).
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.fabric import phantom

from .test_congestion import ECT0, NOT_ECT, ROCE, _fabric, receiver, result, results, sender

pytestmark = pytest.mark.ovs

CONTROLLER = {
    "mode": "ecmp",
    "telemetry_ms": 100,
    "ecn": {"mode": "phantom", "drain": 0.95,
            "classes": {"collective": {"min_kb": 30, "max_kb": 60, "probability": 0.5},
                        "agents": {"min_kb": 30, "max_kb": 60, "probability": 0.5}}},
}


@pytest.fixture(scope="module")
def phantom_live(tmp_path_factory):
    from testbed.host.capabilities import probe
    from testbed.host.naming import new_run_id

    if not probe(new_run_id()).nftables:
        pytest.skip("nftables is missing: the phantom-queue marker needs it")
    fabric = _fabric(tmp_path_factory, CONTROLLER)
    live = next(fabric)
    table = live.phantom_table
    yield live
    next(fabric, None)  # teardown, and the leftovers check of _fabric
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert table not in tables


def streams(live, flows: list[tuple], seconds: float,
            sent: list[int] | None = None) -> dict[int, dict]:
    """Run UDP streams (source host, destination port, Mb/s, TOS, and optionally the
    datagram's size, 8000 bytes if not given) into the last host at once; returns the ECN
    counts of each destination port's receiver (and appends each flow's count of sent
    datagrams to ``sent``)."""
    dst = live.spec.hosts[-1]
    rxs = {port: receiver(live, dst.name, port)
           for port in dict.fromkeys(flow[1] for flow in flows)}
    txs = [sender(live, src, dst.interface(0, 0).ip, port, mbps=mbps, seconds=seconds,
                  tos=tos, name=f"s{i}", size=size[0] if size else 8000)
           for i, (src, port, mbps, tos, *size) in enumerate(flows)]
    for tx in txs:
        tx.wait(seconds + 10)
        if sent is not None:
            sent.append(result(tx)["sent"])
    return dict(zip(rxs, results(*rxs.values()), strict=True))


def test_phantom_queues_hook_every_switch_port(phantom_live):
    live = phantom_live
    text = subprocess.run(["nft", "list", "table", "netdev", live.phantom_table],
                          capture_output=True, text=True, check=True).stdout
    for port in phantom.switch_ports(live.spec):
        assert f'hook egress device "{port.ifname}"' in text


def test_a_stream_below_the_drain_rate_is_not_marked(phantom_live):
    """6 Mb/s of ECN-capable RoCE through three switch ports: the phantom queues drain at
    19 Mb/s and stay empty. (A stall of ovs-vswitchd of over 40 ms could release a
    30 KB burst at once; a percent of marks is allowed for that, no more.)"""
    h0 = phantom_live.spec.hosts[0].name
    got = streams(phantom_live, [(h0, ROCE, 6, ECT0)], 3)[ROCE]
    assert got["packets"] > 200
    assert got["ce"] <= 0.01 * got["packets"], got
    assert got["ce"] + got["ect0"] == got["packets"]


def test_a_stream_above_the_drain_rate_is_marked_before_the_queue_builds(phantom_live):
    """One ECN-capable stream at 98 % of the link rate: above the 95 % drain, so the
    phantom queue fills and marks, while the real queue (the link's) does not overflow."""
    live = phantom_live
    h0, h3 = live.spec.hosts[0], live.spec.hosts[-1]
    downlink = f"{h3.interface(0, 0).switch}e{h3.interface(0, 0).switch_port}"
    before = live.fabric.queue_stats()[downlink]["drops"]
    got = streams(live, [(h0.name, ROCE, 19.6, ECT0)], 4)[ROCE]
    assert got["packets"] > 500
    assert got["ce"] > 0.1 * got["packets"], got
    assert got["ce"] + got["ect0"] == got["packets"]
    assert live.fabric.queue_stats()[downlink]["drops"] == before
    marks = phantom.read_marks(live.phantom_table)
    assert marks[downlink]["collective"] > 0  # the port into h3 marked, as counted there


def test_two_streams_into_one_port_are_marked_in_their_class_only(phantom_live):
    """19.6 Mb/s into one 20 Mb/s port: ECN-capable RoCE from two hosts (9.4 Mb/s each)
    beside a light ECN-capable UDP stream of small datagrams to another UDP port, which is
    no class of the marker. Together they are above the phantom queue's drain (19 Mb/s)
    and below the link's rate, so the real queue does not drop and every light datagram
    arrives: the RoCE streams are marked, the light stream, counted in the same phantom
    queue, never (marked as often as RoCE, 400 datagrams would carry a dozen marks)."""
    h0, h2 = phantom_live.spec.hosts[0].name, phantom_live.spec.hosts[2].name
    sent: list[int] = []
    got = streams(phantom_live, [(h0, ROCE, 9.4, ECT0), (h2, ROCE, 9.4, ECT0),
                                 (h2, ROCE + 1, 0.8, ECT0, 1000)], 4, sent)
    roce, other = got[ROCE], got[ROCE + 1]
    assert roce["packets"] > 500 and roce["ce"] > 0.03 * roce["packets"], (got, sent)
    assert other["packets"] > 0.9 * sent[2] > 300 and other["ce"] == 0, (got, sent)
    assert other["ect0"] == other["packets"]


def test_not_ect_is_never_marked_but_counts_in_the_phantom_queue(phantom_live):
    """A not-ECT RoCE stream at 17 Mb/s and a light ECT one at 2.5 Mb/s share the port
    into h3: together above the drain rate, each alone below it. The light stream is
    marked because the phantom queue counts every byte; every not-ECT packet arrives
    not-ECT (a marked one would arrive as CE and be missing from the not-ECT count)."""
    h0, h2 = phantom_live.spec.hosts[0].name, phantom_live.spec.hosts[2].name
    sent: list[int] = []
    got = streams(phantom_live, [(h0, ROCE, 17, NOT_ECT), (h2, ROCE, 2.5, ECT0)], 4,
                  sent)[ROCE]
    plain, light = sent
    ect = got["ect0"] + got["ce"]
    assert got["not_ect"] > 0.98 * plain, (got, sent)
    assert ect <= light and got["ce"] <= light
    # alone, far below the drain rate, it would not be marked at all (the 6 Mb/s test)
    assert ect > 0.9 * light and got["ce"] > 0.05 * ect, (got, sent)
    marks = phantom.read_marks(phantom_live.phantom_table)
    assert sum(m.get("collective", 0) for m in marks.values()) >= got["ce"]
