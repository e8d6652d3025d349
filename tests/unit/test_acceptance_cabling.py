"""The cabling check without a lab: LLDP frames as Wireshark's dissector reads them, and
the verdicts on a fabric whose cables are right, swapped or missing."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from testbed.acceptance import cabling
from testbed.acceptance.lldp import End, Heard, frame, parse
from topologies.leafspine import build_fabric
from traffic.pcapfile import write_pcap

P = "tbacc0"


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (Wireshark)")
def test_wireshark_reads_our_lldp_frame_as_we_do(tmp_path):
    f = frame(End("n0", "n0p0r0", "02:00:00:00:00:01"), "lab x")
    write_pcap(tmp_path / "f.pcap", [f])
    done = subprocess.run(["tshark", "-r", str(tmp_path / "f.pcap"), "-T", "json"],
                          capture_output=True, text=True, check=True)
    lldp = json.loads(done.stdout)[0]["_source"]["layers"]["lldp"]
    tlvs = {k: v for t in lldp.values() if isinstance(t, dict) for k, v in t.items()}
    assert tlvs["lldp.chassis.subtype"] == "7" and tlvs["lldp.port.subtype"] == "5"
    assert bytes.fromhex(tlvs["lldp.chassis.id"].replace(":", "")) == b"n0"
    assert tlvs["lldp.port.id"] == "n0p0r0"
    assert tlvs["lldp.time_to_live"] == "120" and tlvs["lldp.tlv.system.name"] == "lab x"
    assert parse(f) == Heard("n0", "n0p0r0", "lab x")
    assert parse(f[:14] + bytes(40)) is None and parse(b"\x00" * 60) is None


def spec():
    return build_fabric(prefix=P, planes=1, rails=2, nodes=4, leaves_per_plane=2,
                        spines_per_plane=2)


def heard_on(s, swap: tuple[str, str] | None = None, cut: str | None = None) -> dict:
    """What every interface hears on ``s``'s cables, with two host NICs' cables swapped
    (their switch ends exchanged) or one link's cable missing."""
    peer = {}
    for lk in s.links:
        peer[lk.a_intf], peer[lk.b_intf] = lk.b_intf, lk.a_intf
    if swap:
        x, y = (P + n for n in swap)
        px, py = peer[x], peer[y]
        peer[x], peer[y], peer[px], peer[py] = py, px, y, x
    heard = {me: [other] for me, other in peer.items()}
    if cut:
        lk = next(lk for lk in s.links if cut in (lk.a_intf, lk.b_intf))
        heard[lk.a_intf], heard[lk.b_intf] = [], []
    return heard


def test_a_correct_fabric_is_accepted_link_by_link():
    s = spec()
    cables = cabling.judge(s, heard_on(s))
    assert len(cables) == len(s.links) and all(c.accepted for c in cables)
    assert {c.group for c in cables} == {"rail 0, plane 0", "rail 1, plane 0", "plane 0"}


def test_two_nics_swapped_between_rails_are_named_by_both_ends():
    s = spec()
    nics = [i.name[len(P):] for i in s.host(P + "n1").interfaces]  # n1p0r0, n1p0r1
    cables = cabling.judge(s, heard_on(s, swap=(nics[0], nics[1])))
    bad = [c for c in cables if not c.accepted]
    assert [c.link for c in bad] == ["n1-p0l0", "n1-p0l1"]
    assert bad[0].reason() == (f"n1p0r0 hears {bad[1].b}, not {bad[0].b}; "
                               f"{bad[0].b} hears n1p0r1, not n1p0r0")
    assert cabling.swaps(cables) == [("n1-p0l0", "n1-p0l1")]


def test_a_missing_cable_is_named_and_no_other():
    s = spec()
    lk = s.links[-1]  # a fabric link
    cables = cabling.judge(s, heard_on(s, cut=lk.a_intf))
    bad = [c for c in cables if not c.accepted]
    assert len(bad) == 1 and bad[0].link == f"{lk.a[len(P):]}-{lk.b[len(P):]}"
    assert "hears nothing" in bad[0].reason() and cabling.swaps(cables) == []
