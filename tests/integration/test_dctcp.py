"""DCTCP in the host namespaces (``agents.congestion_control: dctcp``) on real packets.

A 1-plane fabric of 5 Mb/s links whose switch ports mark CE with RED
(``controller.ecn.mode: switch``), its hosts set to dctcp by :func:`workloads.start` the
way a run sets them (each host route's ``congctl``). Two iperf3 flows into one host queue
at that host's switch port. The sender's data socket must run dctcp with ECN negotiated,
not DCTCP's fallback (what a sender gets when the receiver's listener does not run DCTCP),
and must have had data acked with ECE, and DCTCP's alpha must show that it counted them
(:func:`reacted`): DCTCP saw the switch's marks. Needs tcp_dctcp and RED: the lab VM's
kernel.
"""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest

from testbed.core.scenario import parse
from testbed.host.procs import wait_for
from testbed.workloads import generators

from .conftest import small_fabric

pytestmark = [pytest.mark.ovs, pytest.mark.vm]

LINK_MBPS = 5  # the emulated lab VM forwards about 20 Mb/s in all; two flows offer 10
RED = {"min_kb": 10, "max_kb": 30, "probability": 0.5}
PORTS = (5301, 5302)
SECONDS = 5


@pytest.fixture(scope="module")
def dctcp_live(tmp_path_factory):
    from testbed.host.capabilities import probe
    from testbed.host.naming import new_run_id

    caps = probe(new_run_id())
    if not caps.tcp_dctcp:
        pytest.skip("the kernel has no tcp_dctcp (available: "
                    f"{' '.join(caps.tcp_congestion_controls)}): DCTCP in the hosts needs it")
    if not caps.red:
        pytest.skip("the kernel has no RED qdisc (sch_red): switch-side ECN marking needs it")
    controller = {"mode": "ecmp", "ecn": {"mode": "switch",
                                          "classes": {"collective": RED, "agents": RED}}}
    with small_fabric(tmp_path_factory, "dctcp", controller=controller, planes=1,
                      link_mbps=LINK_MBPS) as (live, stack):
        yield live, stack


def tcp_sockets(ss_output: str) -> list[dict]:
    """``ss -HtinO`` lines of established connections as dicts: ``peer``, ``cc`` (the
    congestion control), ``flags`` (words without a value: ``ecn``, ``ecnseen``...),
    ``dctcp`` (DCTCP's fields, or the string ``fallback_mode``), and every other
    ``key:value`` word as a string.

    >>> s, = tcp_sockets("ESTAB 0 0 10.0.0.1:40 10.0.0.4:5301 dctcp wscale:7,7 ecn "
    ...                  "bytes_acked:9 dctcp:(ce_state:0,alpha:3,ab_ecn:2896,ab_tot:14480)")
    >>> s["cc"], sorted(s["flags"]), s["bytes_acked"], s["dctcp"]["ab_ecn"]
    ('dctcp', ['ecn'], '9', 2896)
    """
    sockets = []
    for line in ss_output.splitlines():
        words = line.split()
        if len(words) < 6 or words[0] != "ESTAB":
            continue
        sock: dict = {"peer": words[4], "cc": words[5], "flags": set(), "dctcp": None}
        for word in words[6:]:
            key, colon, value = word.partition(":")
            if not colon:
                sock["flags"].add(word)
            elif key == "dctcp":
                sock["dctcp"] = (value if not value.startswith("(") else
                                 {k: int(v) for k, v in (kv.split(":") for kv in
                                                         value.strip("()").split(","))})
            else:
                sock[key] = value
        sockets.append(sock)
    return sockets


def data_socket(fabric, host: str, port: int) -> dict | None:
    """The iperf3 client's data connection to ``port`` (the one that sent the most; the
    other is its control connection), as :func:`tcp_sockets` reads it."""
    done = fabric.run(host, ["ss", "-HtinO", "dport", "=", f":{port}"])
    sockets = tcp_sockets(done.stdout)
    return max(sockets, key=lambda s: int(s.get("bytes_acked", 0)), default=None)


def ce_echoed(sock: dict) -> bool:
    """DCTCP's own count of bytes acked with ECE (this window) is above 0."""
    return isinstance(sock["dctcp"], dict) and sock["dctcp"]["ab_ecn"] > 0


def reacted(readings: list[dict]) -> bool:
    """DCTCP counted marked bytes in some window: a reading has ``ab_ecn`` above 0, or its
    ``alpha`` rose between two readings. Each window's counts are reset on the ACK that
    ends it, which at a few packets in flight is nearly every ACK, so a reading rarely
    catches them; but alpha only decays (by 1/16 a window) in windows without marks and
    rises only with marked bytes in one.

    >>> r = lambda alpha, ab_ecn=0: {"dctcp": {"alpha": alpha, "ab_ecn": ab_ecn}}
    >>> reacted([r(900), r(504), r(589)]), reacted([r(1024), r(900), r(700)])
    (True, False)
    >>> reacted([r(1024), r(700, ab_ecn=8948)]), reacted([{"dctcp": "fallback_mode"}])
    (True, False)
    """
    alphas = [r["dctcp"]["alpha"] for r in readings if isinstance(r["dctcp"], dict)]
    return any(ce_echoed(r) for r in readings) or any(
        b > a for a, b in zip(alphas, alphas[1:], strict=False))


def test_hosts_run_dctcp_and_it_reacts_to_the_switch_marks(dctcp_live):
    live, stack = dctcp_live
    spec, fabric = live.spec, live.fabric
    h0, h2, h3 = spec.hosts[0], spec.hosts[2], spec.hosts[3]
    variant = parse({"name": "dctcp", "topology": {"planes": 1, "nodes": 4},
                     "agents": {"enabled": False, "congestion_control": "dctcp"}}).variants[0]
    work = generators.start(fabric, variant, out=live.out, pid_dir=live.pid_dir,
                           duration_s=SECONDS, seed=1, stack=stack)
    assert work.congestion_control == "dctcp"
    for host in spec.hosts:  # every route of every host carries it
        routes = json.loads(fabric.run(host.name, ["ip", "-j", "-4", "route"]).stdout)
        assert routes and all(any(m.get("congestion") == "dctcp" for m in r.get("metrics", []))
                              for r in routes), (host.name, routes)
    dst = h3.interface(0, 0).ip
    with ExitStack() as procs:
        for port in PORTS:
            server = fabric.spawn(h3.name, f"dctcp-s{port}",
                                  ["iperf3", "-s", "-1", "-B", dst, "-p", str(port)],
                                  pid_dir=live.pid_dir)
            procs.callback(server.stop)
            assert wait_for(lambda: "LISTEN" in fabric.run(  # noqa: B023
                h3.name, ["ss", "-Hltn", "sport", "=", f":{port}"]).stdout, 5)  # noqa: B023
        outputs = [live.out / f"dctcp-client{port}.json" for port in PORTS]
        clients = []
        for src, port, output in zip((h0, h2), PORTS, outputs, strict=True):
            client = fabric.spawn(src.name, f"dctcp-c{port}",
                                  ["iperf3", "-c", dst, "-p", str(port), "-t", str(SECONDS),
                                   "-J", "--connect-timeout", "3000"],
                                  pid_dir=live.pid_dir, stdout_file=output)
            procs.callback(client.stop)
            clients.append(client)
        # read the sender's socket while the flows run, until DCTCP has shown that it
        # counted marked bytes (:func:`reacted`)
        readings: list[dict] = []
        receiver: list[dict] = []  # the server's end of that flow, read at the same time

        def marked() -> bool:
            sock = data_socket(fabric, h0.name, PORTS[0])
            if sock is None:
                return False
            readings.append(sock)
            receiver[:] = tcp_sockets(fabric.run(h3.name, [
                "ss", "-HtinO", "sport", "=", f":{PORTS[0]}"]).stdout)
            return reacted(readings)

        wait_for(marked, SECONDS + 2, interval=0.2)
        for client in clients:
            assert client.wait(SECONDS + 15) == 0, client.argv
    assert readings, "no iperf3 data connection seen in the sender's namespace"
    last = readings[-1]
    assert all(r["cc"] == "dctcp" for r in readings), readings
    # DCTCP falls back to Reno exactly when ECN was not negotiated (ss prints no "ecn"
    # flag for these sockets in the lab VM's iproute2)
    assert all(r["dctcp"] != "fallback_mode" for r in readings), readings
    assert int(last.get("delivered_ce", 0)) > 0, last  # ACKs with ECE came back...
    assert reacted(readings), [(r["dctcp"], r.get("delivered_ce")) for r in readings]
    assert receiver and all(s["cc"] == "dctcp" for s in receiver), receiver  # listener's too
    for output in outputs:  # iperf3's own view of both ends
        end = json.loads(output.read_text())["end"]
        assert (end["sender_tcp_congestion"], end["receiver_tcp_congestion"]) == (
            "dctcp", "dctcp"), end
