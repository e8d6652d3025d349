"""The drop counters no switch queue has, read from a /proc tree laid out as the kernel's."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.fabric import drops
from testbed.host import packet_sockets
from testbed.host.packet_sockets import PacketSocket

#: /proc/net/dev's layout (its two header lines shortened here)
DEV = """Inter-|   Receive  |  Transmit
 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop ...
    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
tb9p0l0e1: 1000 10 0 {rx} 0 0 0 0 2000 20 0 {tx} 0 0 0 0
  eth0: 5 5 0 99 0 0 0 0 5 5 0 99 0 0 0 0
"""

#: /proc/net/snmp's layout, with fewer columns
SNMP = """Ip: Forwarding DefaultTTL InReceives InHdrErrors InDiscards
Ip: 1 64 100 0 {ip}
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 50 0 {inerr} 40 {rcvbuf} 0
"""


def _proc(root: Path, *, rx=0, tx=0, ip=0, inerr=0, rcvbuf=0, backlog=0) -> Path:
    (root / "net").mkdir(parents=True, exist_ok=True)
    (root / "net" / "dev").write_text(DEV.format(rx=rx, tx=tx))
    (root / "net" / "softnet_stat").write_text(f"00000010 {backlog:08x} 00000000\n"
                                               "00000010 00000001 00000000\n")
    host = root / "42" / "net"
    host.mkdir(parents=True, exist_ok=True)
    host.joinpath("dev").write_text(DEV.replace("tb9p0l0e1", "tb9h0-eth0").format(rx=rx, tx=0))
    host.joinpath("snmp").write_text(SNMP.format(ip=ip, inerr=inerr, rcvbuf=rcvbuf))
    return root


def test_a_reading_counts_only_the_labs_interfaces_and_its_hosts(tmp_path, monkeypatch):
    monkeypatch.setattr(drops, "_switch_sockets", lambda: [])
    proc = _proc(tmp_path, rx=2, tx=3, ip=1, inerr=4, rcvbuf=5, backlog=7)
    got = drops.read("tb9", ["tb9p0l0e1"], {"h0": 42}, [1], proc=proc)
    # eth0's 99 drops are the host's, not the lab's
    assert got == {"switch_sockets": 0, "interfaces": {"tb9p0l0e1": 5, "tb9h0-eth0": 2},
                   "host_udp": 9, "host_ip": 1, "backlog": 8}


def test_the_difference_names_where_the_drops_happened(tmp_path, monkeypatch):
    def port(ifindex: int, drops_: int, fd: int) -> tuple:
        return (PacketSocket(inode=fd, protocol=3, ifindex=ifindex, rcvbuf=8388608,
                             sndbuf=212992, drops=drops_), 1, fd)

    sockets = iter([[port(9, 1, 40)], [port(9, 4, 40), port(8, 50, 41)]])
    monkeypatch.setattr(packet_sockets, "ifname", {9: "tb9p0l0e1", 8: "tb8p0l0e1"}.get)
    monkeypatch.setattr(drops, "_switch_sockets", lambda: next(sockets))
    before = drops.read("tb9", ["tb9p0l0e1"], {"h0": 42}, [1], proc=_proc(tmp_path))
    after = drops.read("tb9", ["tb9p0l0e1"], {"h0": 42}, [1],
                       proc=_proc(tmp_path, rx=1, rcvbuf=2, backlog=3))
    d = drops.delta(before, after)
    # another lab's port (tb8...) is not this run's
    assert d == {"switch_sockets": 3, "host_udp": 2, "host_ip": 0, "backlog": 3,
                 "interfaces": {"tb9h0-eth0": 1, "tb9p0l0e1": 1}, "total": 7}


def test_a_host_that_is_gone_counts_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(drops, "_switch_sockets", lambda: [])
    proc = _proc(tmp_path)
    got = drops.read("tb9", [], {"h0": 42, "h1": 4242}, None, proc=proc)
    assert got["host_udp"] == 0 and "tb9h0-eth0" in got["interfaces"]


@pytest.mark.parametrize("data", [b"", b"garbage\n", packet_sockets.message(
    inode=1, protocol=3, ifindex=9, meminfo=(0, 8))])  # no drops counter: not counted
def test_an_unreadable_packet_diag_answer_counts_nothing(data):
    assert drops.socket_drops([(s, 1, 1) for s in packet_sockets.parse(data)],
                              ["tb9p0l0e1"], name={9: "tb9p0l0e1"}.get) == 0


def test_switch_unsent_is_what_the_switches_read_and_no_queue_took():
    from testbed.fabric.drops import delta

    base = {"switch_sockets": 0, "interfaces": {}, "host_udp": 0, "host_ip": 0, "backlog": 0}
    before = {**base, "switch_received": 100, "switch_intake": 90, "switch_queue_drops": 10}
    after = {**base, "switch_received": 6108, "switch_intake": 1248, "switch_queue_drops": 13}
    out = delta(before, after)
    assert out["switch_unsent"] == 4850 and out["total"] == 4850
    # each refused send may be counted twice by its queue: the bound adds one per drop
    assert out["switch_unsent_max"] == 4853
    # floods (more taken than read) never count as negative; without readings, no key
    assert delta(before, {**after, "switch_intake": 7000})["switch_unsent"] == 0
    assert "switch_unsent" not in delta(base, base)


def test_a_summary_naming_a_broken_key_file_is_one_error(tmp_path):
    import pytest

    from testbed.macsec.decrypt import keys_from

    (tmp_path / "k.json").write_text("[]")
    with pytest.raises(ValueError, match="no links"):
        keys_from({"macsec": {"keys": {"file": "k.json", "links": []}}}, tmp_path)
    with pytest.raises(ValueError, match="No such file"):
        keys_from({"macsec": {"keys": {"file": "gone.json", "links": []}}}, tmp_path)
