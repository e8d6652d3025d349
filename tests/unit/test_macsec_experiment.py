"""MACsec scenario section validation, attack accounting, attacker frames, pcap decryption."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import yaml

from testbed.errors import ConfigError
from testbed.experiments.macsec.run import attack_entry, closing_note
from testbed.experiments.macsec.schema import MacsecSection, check_timing, validate
from testbed.macsec.attacker import (
    Captured,
    InjectTime,
    capture,
    tampered_frame,
    untagged_frame,
)
from testbed.macsec.config import LinkConfig
from testbed.macsec.decrypt import decrypt_pcap
from testbed.macsec.forwarder import build_secy
from traffic.pcapfile import write_pcap

ROOT = Path(__file__).resolve().parents[2]


def test_empty_section_gets_every_default() -> None:
    cfg = validate({})
    assert set(cfg) == {f.alias or name for name, f in MacsecSection.model_fields.items()}
    assert cfg["suite"] == "gcm-aes-128" and cfg["encrypt"] is True
    assert cfg["validate"] == "strict" and cfg["replay_window"] == 0
    assert cfg["mtu"] == 1500 and cfg["link_mbps"] == 20 and cfg["backend"] == "auto"
    assert cfg["rotate_at_s"] is None
    assert cfg["attack"] == {"tampered": 10, "replayed": 10, "untagged": 10, "at_s": None}


def test_scenario_file_section_is_valid() -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "macsec.yaml").read_text())
    assert data["name"] == "macsec" and 5 <= data["duration_s"] <= 30
    assert not {"topology", "agents", "training"} & set(data)
    cfg = validate(data["macsec"])
    check_timing(cfg, data["duration_s"])
    assert cfg["attack"]["tampered"] > 0 and cfg["rotate_at_s"] is not None


def test_good_values_pass_through() -> None:
    section = {"suite": "gcm-aes-xpn-256", "encrypt": False, "validate": "check",
               "replay_window": 64, "mtu": 9000, "link_mbps": 2.5, "bulk_seconds": 3,
               "chain_concurrency": 2, "rotate_at_s": 1.5, "backend": "userspace",
               "attack": {"tampered": 0, "replayed": 3, "untagged": 1, "at_s": 2}}
    cfg = validate(section)
    assert cfg == {**section, "chain_timeout_ms": 2000}


@pytest.mark.parametrize("section, field", [
    ({"colour": 1}, "macsec.colour"),
    ({"suite": "aes-cbc"}, "macsec.suite"),
    ({"suite": 128}, "macsec.suite"),
    ({"encrypt": "yes"}, "macsec.encrypt"),
    ({"encrypt": 1}, "macsec.encrypt"),
    ({"validate": "lenient"}, "macsec.validate"),
    ({"replay_window": -1}, "macsec.replay_window"),
    ({"replay_window": 1.5}, "macsec.replay_window"),
    ({"replay_window": True}, "macsec.replay_window"),
    ({"suite": "gcm-aes-xpn-128", "replay_window": 2**31}, "macsec.replay_window"),
    ({"mtu": 1279}, "macsec.mtu"),
    ({"mtu": 9001}, "macsec.mtu"),
    ({"link_mbps": 0}, "macsec.link_mbps"),
    ({"link_mbps": "fast"}, "macsec.link_mbps"),
    ({"bulk_seconds": 0}, "macsec.bulk_seconds"),
    ({"chain_concurrency": 0}, "macsec.chain_concurrency"),
    ({"chain_timeout_ms": -5}, "macsec.chain_timeout_ms"),
    ({"rotate_at_s": 0}, "macsec.rotate_at_s"),
    ({"backend": "dpdk"}, "macsec.backend"),
    ({"attack": []}, "macsec.attack"),
    ({"attack": {"tampered": -1}}, "macsec.attack.tampered"),
    ({"attack": {"replayed": 2.0}}, "macsec.attack.replayed"),
    ({"attack": {"untagged": "3"}}, "macsec.attack.untagged"),
    ({"attack": {"at_s": -1}}, "macsec.attack.at_s"),
    ({"attack": {"flood": 3}}, "macsec.attack.flood"),
])
def test_bad_field_is_named(section: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(section)
    assert err.value.field == field


def test_section_must_be_a_mapping_and_where_is_used() -> None:
    with pytest.raises(ConfigError) as err:
        validate([1], where="variants[0].macsec")  # type: ignore[arg-type]
    assert err.value.field == "variants[0].macsec"


def test_events_must_fall_inside_the_traffic() -> None:
    cfg = validate({"rotate_at_s": 20})
    with pytest.raises(ConfigError) as err:
        check_timing(cfg, 15)
    assert err.value.field == "macsec.rotate_at_s"
    cfg = validate({"attack": {"at_s": 15}})
    with pytest.raises(ConfigError) as err:
        check_timing(cfg, 15)
    assert err.value.field == "macsec.attack.at_s"
    check_timing(validate({"rotate_at_s": 3, "attack": {"at_s": 5}}), 15)


def _counters(**values: int) -> dict[str, int]:
    base = dict.fromkeys(["InPktsOK", "InPktsNotValid", "InPktsLate", "InPktsNoTag",
                          "InPktsUntagged", "InPktsInvalid", "OutPktsProtected",
                          "OutPktsEncrypted"], 0)
    return {**base, **values}


def test_attack_entry_accounts_for_every_frame() -> None:
    link = {"sides": {"a": _counters(OutPktsEncrypted=100, InPktsOK=50),
                      "b": _counters(InPktsOK=100, InPktsNotValid=3, InPktsLate=2,
                                     InPktsNoTag=4)},
            "tap": {}, "io": {"a": {"wire_tx": 100, "wire_rx": 50},
                              "b": {"wire_rx": 109, "wire_tx": 50}}}
    sent = {"tampered_sent": 3, "replayed_sent": 2, "untagged_sent": 4}
    entry = attack_entry(sent, link, "strict")
    assert entry["delivered_to_tap"] == 0 and entry["accounting_exact"]
    assert entry["counters_b"]["InPktsNotValid"] == 3
    assert entry["expected_b"] == {"InPktsNotValid": 3, "InPktsLate": 2, "InPktsNoTag": 4}
    link["sides"]["b"].update(InPktsNoTag=0, InPktsUntagged=4)  # validate=check delivers
    assert attack_entry(sent, link, "check")["delivered_to_tap"] == 4


def test_replays_sent_inside_the_window_are_not_expected_late() -> None:
    link = {"sides": {"a": _counters(OutPktsEncrypted=100), "b": _counters(InPktsOK=101)},
            "tap": {}, "io": {"a": {"wire_tx": 100, "wire_rx": 0},
                              "b": {"wire_rx": 103, "wire_tx": 0}}}
    sent = {"tampered_sent": 0, "replayed_sent": 3, "untagged_sent": 0,
            "replayed_in_window": 1}
    entry = attack_entry(sent, link, "strict")
    assert entry["expected_b"]["InPktsLate"] == 2 and entry["replayed_in_window"] == 1
    assert entry["delivered_to_tap"] == 1  # the receiver's window accepted it


def test_closing_note_names_throughput_and_counters() -> None:
    macsec = {"backend": "userspace", "suite": "gcm-aes-128",
              "throughput_mbps": {"protected": 18.5, "unprotected": 19.0, "ratio": 0.9737},
              "chain_latency_ms": {"protected": {"p50": 10.0, "p99": 30.0},
                                   "unprotected": {"p50": 9.0, "p99": None}},
              "attack": {"tampered_sent": 1, "replayed_sent": 2, "untagged_sent": 3,
                         "counters_b": {"InPktsNotValid": 1, "InPktsLate": 2,
                                        "InPktsUnchecked": 0},
                         "delivered_to_tap": 0}}
    note = closing_note(macsec)
    assert "18.50 Mb/s protected vs 19.00 Mb/s unprotected (97.4%)" in note
    assert "InPktsNotValid +1, InPktsLate +2;" in note and "InPktsUnchecked" not in note


def _keys(cfg: LinkConfig) -> dict:
    return {"links": [{"name": "t", "suite": cfg.suite, "encrypt": cfg.encrypt,
                       "salt": cfg.salt, "sides": {
                           s: {"sci": cfg.side(s).sci, "ssci": cfg.side(s).ssci,
                               "keys": {str(k): v for k, v in cfg.side(s).keys.items()}}
                           for s in "ab"}}]}


@pytest.mark.parametrize("suite", ["gcm-aes-128", "gcm-aes-xpn-256"])
def test_decrypt_pcap_counts_good_replayed_and_tampered(suite: str, tmp_path: Path) -> None:
    cfg = LinkConfig.generate("dx1", suite=suite)
    a, b = build_secy(cfg, "a"), build_secy(cfg, "b")
    mac_a, mac_b = (bytes.fromhex(cfg.side(s).mac.replace(":", "")) for s in "ab")
    plain = [untagged_frame(mac_b, mac_a, "10.0.0.1", "10.0.0.2", i) for i in range(5)]
    wire = [a.protect(f) for f in plain] + [b.protect(plain[0][6:12] + plain[0][:6]
                                                      + plain[0][12:])]
    tampered, _ = tampered_frame(wire[-2], 0)
    frames = [*wire, wire[0], tampered, plain[1]]  # + a replay, a tampered, an untagged
    write_pcap(tmp_path / "w.pcap", frames)
    keys = json.loads(json.dumps(_keys(cfg)))
    assert decrypt_pcap(tmp_path / "w.pcap", keys) == (7, 1)
    other = _keys(LinkConfig.generate("dx2", suite=suite))
    assert decrypt_pcap(tmp_path / "w.pcap", other) == (0, 8)


def test_attacker_frames() -> None:
    frame = untagged_frame(b"\x02" * 6, b"\x04" * 6, "10.1.2.3", "10.1.2.4", 7)
    ip = frame[14:34]
    assert frame[12:14] == b"\x08\x00" and socket.inet_ntoa(ip[16:20]) == "10.1.2.4"
    words = struct.unpack("!10H", ip)
    assert (sum(words) + (sum(words) >> 16)) & 0xFFFF == 0xFFFF  # header checksum
    cfg = LinkConfig.generate("dx3")
    a, b = build_secy(cfg, "a"), build_secy(cfg, "b")
    good = a.protect(frame)
    bad, pn = tampered_frame(good, 5)
    assert pn == 1 + 1_000_005 and len(bad) == len(good)
    assert b.validate(bad) is None and b.counters.InPktsNotValid == 1
    assert b.validate(good) is not None


def _frame(src: bytes, pn: int, an: int = 0) -> bytes:
    return b"\xff" * 6 + src + b"\x88\xe5" + bytes([0x2c | an, 0]) + pn.to_bytes(4, "big") \
        + b"x" * 32


def test_the_attacker_captures_until_the_time_the_run_writes(tmp_path: Path) -> None:
    """Frames seen before the injection time is written are kept (the oldest for replay,
    the newest as the template); capture ends once the written time has passed."""
    peer, other = b"\x02\x00\x00\x00\x00\x0a", b"\x02\x00\x00\x00\x00\x0b"
    rx, tx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    at = tmp_path / "attacker.at"

    def run() -> None:
        for pn in range(1, 6):
            tx.send(_frame(peer, pn))
            tx.send(_frame(other, 100 + pn))
        time.sleep(0.3)  # still capturing: no time written yet
        tx.send(_frame(peer, 6))
        at.write_text(f"{time.time() + 0.2:.3f}\n")

    t = threading.Thread(target=run)
    start = time.time()
    t.start()
    seen = Captured(3)
    try:
        capture(rx, peer, seen, InjectTime(at))
    finally:
        t.join()
        rx.close()
        tx.close()
    assert [int.from_bytes(f[16:20], "big") for f in seen.replays()] == [1, 2, 3]
    assert seen.newest is not None and int.from_bytes(seen.newest[16:20], "big") == 6
    assert 0.4 < time.time() - start < 30  # ended after the written time; 30: a hang guard


def test_replays_come_from_the_sa_in_use_and_are_late_once_it_carried_the_window() -> None:
    """Before a key rotation the replays are AN 0's first frames; after it, AN 1's (an
    old SA's frames may be refused for their SA, not counted late). A replay is late once
    its SA's highest PN is at least the window above it."""
    peer = b"\x02\x00\x00\x00\x00\x0a"
    seen = Captured(2)
    for pn in range(1, 301):
        seen.add(_frame(peer, pn, an=0))
    assert [int.from_bytes(f[16:20], "big") for f in seen.replays()] == [1, 2]
    assert seen.in_window(256) == 0 and seen.late_in(256) == 0
    assert seen.in_window(299) == 1 and seen.late_in(299) > 0  # PN 2 + 299 > 300
    for pn in range(1, 11):
        seen.add(_frame(peer, pn, an=1))
    assert [f[14] & 3 for f in seen.replays()] == [1, 1]
    assert seen.in_window(256) == 2
    eta = seen.late_in(256)
    assert eta is None or eta > 0  # 248 more frames at the rate of AN 1 so far
    assert Captured(2).late_in(256) is None  # no frame: no rate
