"""A small backbone with real FRR (OSPF + BFD, fast timers): a link cut reroutes by itself.

Every link is encrypted with MACsec (kernel where it exists, the userspace
forwarders here): adjacencies form over the protected interfaces, the wire under
them carries only 802.1AE frames. The test only cuts and restores the link (the
wires lose carrier; the protected interfaces follow); the daemons find the other
path. Then nothing with the run's prefix may be left: namespaces, interfaces, FRR
and forwarder processes, sockets and files under /run/testbed/<id>.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.backbone.frr.router import PRESETS
from testbed.core.runner import run_section
from testbed.host.naming import new_run_id, run_prefix
from testbed.macsec.decrypt import decrypt_frame, keys_from, receivers
from topologies.backbone import small_backbone
from traffic.pcapfile import read_frames

#: OSPF's LSA retransmit at 1 s (FRR's default, 5 s, is every preset's): at bring-up some
#: LSAs only arrive by a retransmit (why was not traced); on
#: examples/backbone-topology.yaml the whole run took 27-28 s instead of 39 s (two runs
#: each), its detect and restore times the same. The tests judge what comes after.
QUICK_RETRANSMIT = {"retransmit_s": 1}

pytestmark = [pytest.mark.root, pytest.mark.vm,
              pytest.mark.skipif(not Path("/usr/lib/frr/ospfd").exists()
                                 or shutil.which("iperf3") is None,
                                 reason="needs FRR (apt-get install frr) and iperf3"),
              pytest.mark.shares_host]


def _leftovers(run_id: str) -> list[str]:
    prefix = run_prefix(run_id)
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [n.split()[0] for n in netns.splitlines() if n.startswith(prefix)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [ln.split(":")[1].strip() for ln in links.splitlines() if prefix in ln]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found += [p for p in procs.splitlines() if f"/run/testbed/{run_id}/" in p or prefix in p]
    if Path(f"/run/testbed/{run_id}").exists():
        found.append(f"/run/testbed/{run_id}")
    return found


def test_link_cut_reroutes_without_intervention(tmp_path):
    run_id = new_run_id()
    # a ring of four PoPs, two links per span; p1-p2-1 is the unique best ra -> rb link
    bb = small_backbone()
    links = [{"name": lk.name, "a": lk.a, "b": lk.b, "capacity_mbps": 100,
              "length_km": {"p1-p2-1": 200, "p1-p2-2": 1000}.get(lk.name, 2000)}
             for lk in bb.links]
    section = {
        "topology": "inline", "pops": [{"name": p.name} for p in bb.pops],
        "regions": [{"name": "ra", "pops": ["p1", "p4"]}, {"name": "rb", "pops": ["p2", "p3"]}],
        "links": links, "settle_s": 1, "probe_rate_pps": 200,
        # the whole fast set, the one the one-second target is for. With only its BFD and
        # hello timers the rest came from the default set (MinLSInterval 5 s, SPF up to
        # 5 s); in the lab VM a few probes were then lost again late in a window (2,173 ms
        # to restore after the cut once in four runs). With the whole set the cut's window
        # was clean in three of three runs (restore 286-531 ms); after the link's restore 1-3
        # probes were still lost 0.9-4.5 s later, cause not found (not asserted here)
        # (and an LSA retransmit of 1 s, FRR's is 5: see QUICK_RETRANSMIT)
        "timers": {"fast": {**PRESETS["fast"].model_dump(), **QUICK_RETRANSMIT}},
        # a replication flow that only has to keep going: at 10 Mb/s the lab VM's two
        # emulated cores were 92-98 % busy during the cut (its fidelity monitor: 2-8 %
        # idle), and 2 probes were lost 2.8 s after the cut, far from any routing event;
        # at 2 Mb/s five VM runs in a row restored in 223-520 ms, no late loss
        "replication": [{"src": "ra", "dst": "rb", "rate_mbps": 2}],
        "macsec": {"enabled": True, "cipher": "gcm-aes-128"},
        # the path after the cut is read just before the restore, as long before it as a
        # reading takes (seconds under the lab VM's emulation: with the restore 3 s after
        # the cut, a slow VM read the routes before they had moved); the path after the
        # restore is read at the end, 8 s after it (enough in the lab VM under software
        # emulation with the default MinLSInterval, too)
        "faults": [{"at_s": 3, "action": "cut_link", "target": "p1-p2-1"},
                   {"at_s": 7, "action": "restore_link", "target": "p1-p2-1"}],
    }
    try:
        result = run_section("backbone", section, tmp_path, duration_s=15, seed=1, run_id=run_id,
                     progress=lambda line: None)
    finally:
        assert _leftovers(run_id) == []
    entry = result["runs"][0]
    cut, = entry["failovers"]
    restore, = entry["restores"]
    assert cut["fault"] == "cut_link p1-p2-1"
    # the routing tables changed by themselves: before over the cut link, after around it
    assert cut["detect_ms"] is not None and cut["detect_ms"] < 1000
    for pair in ("ra>rb", "rb>ra"):
        assert "p1-p2-1" in cut["path_before"][pair]["links"]
        assert "p1-p2-1" not in cut["path_after"][pair]["links"]
        assert "unreachable" not in cut["path_after"][pair]["nodes"]
        # back on the best link (the whole reading when not: once in a shared CI pass
        # the reading after the restore had no links at all)
        assert "p1-p2-1" in restore["path_after"][pair]["links"], restore["path_after"]
    assert cut["reachability_after"] == 1.0
    assert cut["restore_ms"] is not None and cut["restore_ms"] < 1000
    assert cut["lost_packets"] <= 200  # at most one second of probes on both pairs
    assert restore["reachability_after"] == 1.0
    assert entry["replication"][0]["bytes"] > 0
    assert (tmp_path / "probe_loss.png").stat().st_size > 0
    assert result["backbone"]["design_check"]["ok"]
    _check_encrypted(result, tmp_path)


def _check_encrypted(result: dict, out: Path) -> None:
    """The wire sample holds only MACsec frames that decrypt; the SecYs counted no error."""
    bb = result["backbone"]
    assert bb["encrypted"] is True and bb["macsec"]["cipher"] == "gcm-aes-128"
    fig = result["runs"][0]["macsec"]
    totals = fig["totals"]
    assert totals["InPktsOK"] > 1000  # probes, replication, OSPF and BFD all crossed
    for bad in ("InPktsNotValid", "InPktsInvalid", "InPktsNoTag", "InPktsBadTag",
                "InPktsUnknownSCI", "InPktsNoSCI"):
        assert totals.get(bad, 0) == 0, (bad, totals)
    if fig["backend"] == "userspace":  # the cut reached the protected interfaces
        cut_ends = fig["counters"]["p1-p2-1"]
        assert all(end["carrier_changes"] >= 2 for end in cut_ends.values()), cut_ends
    sample = fig["wire_sample"]
    assert sample["link"] == "p1-p2-1"
    frames = read_frames(out / sample["pcap"])
    assert len(frames) >= 100
    assert {f[12:14] for f in frames} == {b"\x88\xe5"}  # no plaintext OSPF, BFD, ICMP, ARP
    keys = keys_from(fig["keys"], out)  # the variant's key file
    assert (out / fig["keys"]["file"]).stat().st_mode & 0o077 == 0
    assert not [k for lk in keys["links"] for side in lk["sides"].values()
                for k in side["keys"].values() if k in (out / "summary.json").read_text()]
    secys = receivers(keys)
    inner = {}
    for frame in frames:  # each decrypts with the lab keys, and its payload was encrypted
        plain = decrypt_frame(secys, frame)
        assert plain is not None
        assert plain[14:] not in frame
        inner[plain[12:14]] = inner.get(plain[12:14], 0) + 1
    assert set(inner) <= {b"\x08\x00", b"\x08\x06"} and inner[b"\x08\x00"] > 0


def test_bgp_backbone_reroutes_a_cut_by_itself(tmp_path):
    """The same ring under eBGP (an AS per PoP and region, BFD on every session): the
    cut of the best ra -> rb link is detected by BFD and routed around, then restored."""
    run_id = new_run_id()
    bb = small_backbone()
    links = [{"name": lk.name, "a": lk.a, "b": lk.b, "capacity_mbps": 100,
              "length_km": 200} for lk in bb.links]
    section = {
        "topology": "inline", "pops": [{"name": p.name} for p in bb.pops],
        "regions": [{"name": "ra", "pops": ["p1", "p4"]}, {"name": "rb", "pops": ["p2", "p3"]}],
        "links": links, "settle_s": 1, "daemons": ["zebra", "bfdd", "bgpd"],
        "timers": {"fast": {"bfd_ms": 100, "bfd_multiplier": 3, "hello_s": 1, "dead_s": 3}},
        "macsec": {"enabled": False},
        "faults": [{"at_s": 3, "action": "cut_link", "target": "p1-p2-1"},
                   {"at_s": 6, "action": "cut_link", "target": "p1-p2-2"},
                   {"at_s": 9, "action": "restore_link", "target": "p1-p2-1"}],
    }
    try:
        # what is judged is the second cut's window, [6 s, 9 s) up to the restore; the run
        # ends 1 s after the restore (its window's tail_s), which nothing asserts on
        result = run_section("backbone", section, tmp_path, duration_s=10, seed=1,
                             run_id=run_id, progress=lambda line: None)
    finally:
        assert _leftovers(run_id) == []
    assert result["backbone"]["protocol"] == "bgpd"
    entry = result["runs"][0]
    both = entry["failovers"][1]  # the second parallel link: p1-p2 gone entirely
    assert both["fault"] == "cut_link p1-p2-2"
    assert both["detect_ms"] is not None and both["detect_ms"] < 1000
    for pair in ("ra>rb", "rb>ra"):
        assert not {"p1-p2-1", "p1-p2-2"} & set(both["path_after"][pair]["links"])
        assert "unreachable" not in both["path_after"][pair]["nodes"]
    assert both["reachability_after"] == 1.0
    assert both["restore_ms"] is not None and both["restore_ms"] < 1000
