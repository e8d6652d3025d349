"""Unit tests for traffic: RoCEv2 frames and ICRC, pcap reading, pacing math, CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from traffic import replay, roce, training
from traffic.pcapfile import PcapError, read_frames, write_pcap
from traffic.rawsock import TokenBucket, bucket_for

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
SRC_IP, DST_IP = "10.0.0.1", "10.0.0.2"


def scapy_frame(psn: int, opcode: int, dqpn: int, payload: bytes, tos: int, sport: int) -> bytes:
    """The same frame built entirely by Scapy, ICRC included (Scapy computes it itself)."""
    return bytes(
        Ether(src=SRC_MAC, dst=DST_MAC)
        / IP(src=SRC_IP, dst=DST_IP, tos=tos, ttl=64, id=0, flags="DF")
        / UDP(sport=sport, dport=4791, chksum=0)
        / BTH(opcode=opcode, dqpn=dqpn, psn=psn)
        / Raw(payload)
    )


@pytest.mark.parametrize("length", [1, 2, 64, 333, 1024, 4000])
@pytest.mark.parametrize("ecn", [roce.ECN_ECT0, roce.ECN_NOT_ECT, roce.ECN_CE])
def test_template_matches_scapy(length: int, ecn: int) -> None:
    payload = bytes((i * 7) & 0xFF for i in range(length))
    tmpl = roce.FrameTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 50000, 0x1234, length,
                              ecn=ecn, payload=payload)
    cases = [(0, roce.SEND_FIRST), (1, roce.SEND_MIDDLE), (0xFFFFFF, roce.SEND_LAST),
             (123456, roce.SEND_ONLY), (0x800000, roce.SEND_MIDDLE)]
    for psn, opcode in cases:
        ours = tmpl.frame(psn, opcode)
        assert ours == scapy_frame(psn, opcode, 0x1234, payload, ecn, 50000)
        parsed = roce.parse_frame(ours)
        assert parsed == roce.Bth(opcode, 0x1234, psn, True)


def test_template_dqpn_patch_matches_scapy() -> None:
    tmpl = roce.FrameTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 49152, 0, 100)
    for dqpn in (1, 0xABCDEF, 0):
        assert tmpl.frame(7, roce.SEND_LAST, dqpn) == scapy_frame(
            7, roce.SEND_LAST, dqpn, bytes(100), roce.ECN_ECT0, 49152)


def test_template_defaults_ect0() -> None:
    frame = roce.FrameTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 49152, 1, 16).frame(0, 4)
    assert frame[15] & 0b11 == 0b10
    assert frame[12:14] == b"\x08\x00" and frame[36:38] == (4791).to_bytes(2, "big")
    assert frame[40:42] == b"\x00\x00"  # UDP checksum 0
    assert len(frame) == roce.OVERHEAD + 16


def test_icrc_known_vector_connectx4_cnp() -> None:
    """A CNP captured from a ConnectX-4 Lx (from Scapy's roce.uts): ICRC 82fd002a on the wire."""
    frame = bytes.fromhex(
        "e41d2dab2bc27cfe90643b32080045c2"
        "003c718c400040119161 0a0011010a00"
        "1201000012b700280000 8100ffff4000"
        "01180000000000000000 000000000000"
        "00000000000082fd002a".replace(" ", "")
    )
    assert len(frame) == 74
    parsed = roce.parse_frame(frame)
    assert parsed == roce.Bth(roce.CNP_OPCODE, 0x000118, 0, True)
    ip = frame[14:-4]
    assert roce.icrc_ipv4(ip) == bytes.fromhex("82fd002a")
    corrupted = bytearray(frame)
    corrupted[-10] ^= 1
    assert roce.parse_frame(corrupted).icrc_ok is False


def test_icrc_known_vector_scapy_uc_example() -> None:
    """Scapy's UC_SEND_ONLY regression packet has ICRC field 0x78f353f3."""
    pkt = (
        Ether(dst="24:8a:07:a8:fa:22", src="24:8a:07:a8:fa:22")
        / IP(version=4, ihl=5, tos=0x1, id=1144, flags="DF", frag=0, ttl=64,
             src="192.168.0.7", dst="192.168.0.7", len=64)
        / UDP(sport=49152, dport=4791, len=44)
        / BTH(opcode=0x24, migreq=1, padcount=2, pkey=0xFFFF, dqpn=211, psn=13571856)
        / Raw(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00")
    )
    raw = pkt.build()  # ends with the ICRC Scapy computed
    assert raw[-4:] == bytes.fromhex("78f353f3")
    assert roce.icrc_ipv4(raw[14:-4]) == bytes.fromhex("78f353f3")


def test_parse_udp_payload_checks_icrc_with_addresses() -> None:
    tmpl = roce.FrameTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 50001, 42, 200)
    frame = tmpl.frame(99, roce.SEND_MIDDLE)
    udp_payload = frame[42:]
    src, dst = (SRC_IP, 50001), (DST_IP, 4791)
    assert roce.parse(udp_payload, src, dst) == roce.Bth(roce.SEND_MIDDLE, 42, 99, True)
    assert roce.parse(udp_payload) == roce.Bth(roce.SEND_MIDDLE, 42, 99, None)
    assert roce.parse(udp_payload, (SRC_IP, 50002), dst).icrc_ok is False
    bad = bytearray(udp_payload)
    bad[50] ^= 0xFF
    assert roce.parse(bad, src, dst).icrc_ok is False
    with pytest.raises(ValueError):
        roce.parse(b"short")


def test_parse_ignores_masked_fields() -> None:
    """TTL, TOS/ECN (e.g. a CE mark by a switch) and FECN do not change the ICRC."""
    frame = bytearray(roce.FrameTemplate(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 1, 5, 64).frame(1, 0))
    frame[15] |= 0b11  # CE
    frame[22] -= 1  # TTL
    frame[42 + 4] |= 0x80  # FECN
    assert roce.parse_frame(frame).icrc_ok is True


def test_cnp_frame() -> None:
    frame = roce.cnp_frame(SRC_MAC, DST_MAC, SRC_IP, DST_IP, dqpn=0xD2)
    assert len(frame) == 14 + 20 + 8 + 12 + 16 + 4
    parsed = roce.parse_frame(frame)
    assert parsed == roce.Bth(roce.CNP_OPCODE, 0xD2, 0, True)
    assert frame[42 + 4] & 0x40  # BECN set
    assert frame[15] >> 2 == 48 and frame[15] & 0b11 == 0


# --- pcap ------------------------------------------------------------------------

FRAMES = [bytes([i]) * (60 + i) for i in range(5)]


def test_pcap_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "a.pcap"
    write_pcap(path, FRAMES)
    assert read_frames(path) == FRAMES


def test_pcap_and_pcapng_written_by_scapy(tmp_path: Path) -> None:
    from scapy.utils import PcapNgWriter, wrpcap

    pkts = [Ether(f) for f in FRAMES]
    wrpcap(str(tmp_path / "s.pcap"), pkts)
    assert read_frames(tmp_path / "s.pcap") == FRAMES
    with PcapNgWriter(str(tmp_path / "s.pcapng")) as writer:
        for p in pkts:
            writer.write(p)
    assert read_frames(tmp_path / "s.pcapng") == FRAMES


def test_pcap_rejects_garbage(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"hello world, not a capture")
    with pytest.raises(PcapError, match="magic"):
        read_frames(bad)
    good = tmp_path / "t.pcap"
    write_pcap(good, FRAMES)
    (tmp_path / "trunc.pcap").write_bytes(good.read_bytes()[:-3])
    with pytest.raises(PcapError, match="truncated"):
        read_frames(tmp_path / "trunc.pcap")


# --- pacing ------------------------------------------------------------------------


def test_token_bucket_math() -> None:
    b = TokenBucket(rate=1000.0, burst=10.0, now=0.0)
    assert b.tokens == 10.0
    b.tokens = 0.0
    assert b.refill(0.004) == pytest.approx(4.0)
    assert b.refill(1.0) == 10.0  # capped at the burst
    b.tokens = 2.0
    assert b.wait_for(5.0) == pytest.approx(0.003)
    assert b.wait_for(50.0) == pytest.approx(0.008)  # never waits for more than a burst
    assert b.wait_for(1.0) == 0.0
    with pytest.raises(ValueError):
        TokenBucket(0, 1)


def test_bucket_for() -> None:
    assert bucket_for() is None
    bucket, in_bits = bucket_for(pps=10_000)
    assert not in_bits and bucket.rate == 10_000 and bucket.burst == pytest.approx(20)
    bucket, in_bits = bucket_for(mbps=100)
    assert in_bits and bucket.rate == 100e6 and bucket.burst == pytest.approx(200_000)
    bucket, _ = bucket_for(mbps=1, max_cost_bits=12_000)
    assert bucket.burst == 12_000  # at least one largest frame
    with pytest.raises(ValueError):
        bucket_for(pps=1, mbps=1)


# --- replay CLI errors ------------------------------------------------------------------


@pytest.fixture
def pcap(tmp_path: Path) -> Path:
    path = tmp_path / "f.pcap"
    write_pcap(path, FRAMES)
    return path


@pytest.mark.parametrize(
    "args, option, reason",
    [
        (["--iface", "lo", "--pcap", "/nonexistent/x.pcap"], "--pcap", "no such file"),
        (["--iface", "tbnosuchif0", "--pcap", "PCAP"], "--iface", "no such interface"),
        (["--iface", "lo", "--pcap", "PCAP", "--loop", "0"], "--loop", ">= 1"),
        (["--iface", "lo", "--pcap", "PCAP", "--pps", "5", "--mbps", "5"], "--mbps",
         "not allowed"),
        (["--iface", "lo", "--pcap", "PCAP", "--topspeed", "--pps", "5"], "--pps",
         "not allowed"),
        (["--iface", "lo", "--pcap", "PCAP", "--pps", "-3"], "--pps", "> 0"),
        (["--pcap", "PCAP"], "--iface", "required"),
        (["--iface", "lo", "--pcap", "NOTPCAP"], "--pcap", "not a pcap"),
    ],
)
def test_replay_usage_errors(args, option, reason, pcap: Path, capsys) -> None:
    notpcap = pcap.parent / "notpcap.txt"
    notpcap.write_text("just text, no capture here")
    args = [str(pcap) if a == "PCAP" else str(notpcap) if a == "NOTPCAP" else a for a in args]
    assert replay.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and option in err and reason in err, err


# --- training helpers and CLI errors ------------------------------------------------------


def test_split_chunk_and_opcodes() -> None:
    plan = training.split_chunk(10_001, 2, 1000)
    assert [sum(p) for p in plan] == [5001, 5000]
    assert plan[0] == [1000] * 5 + [1] and plan[1] == [1000] * 5
    assert training.split_chunk(10, 4, 1000) == [[3], [3], [2], [2]]
    ops = [training.opcode_for(i, 4) for i in range(4)]
    assert ops == [roce.SEND_FIRST, roce.SEND_MIDDLE, roce.SEND_MIDDLE, roce.SEND_LAST]
    assert training.opcode_for(0, 1) == roce.SEND_ONLY


def _config(tmp_path: Path, **over) -> Path:
    cfg = {"bytes": 1000, "compute_ms": 1, "rate_mbps": 10, "step_timeout_ms": 100,
           "payload": 100, "ranks": [{"channels": [{"iface": "lo", "ip": "127.0.0.1",
                                                    "mac": "00:00:00:00:00:00"}]}] * 2}
    cfg.update(over)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    "extra, option, reason",
    [
        ({"rank": "5"}, "--rank", "must be 0..1"),
        ({"iterations": "0"}, "--iterations", ">= 1"),
        ({"first-iteration": "-1"}, "--first-iteration", ">= 0"),
        ({"config": "/nonexistent.json"}, "--config", "no such file"),
        ({"cfg": {"rate_mbps": 0}}, "--config", "rate_mbps"),
        ({"cfg": {"ranks": [{"channels": []}]}}, "--config", "at least one channel"),
        ({"cfg": {"bytes": "lots"}}, "--config", "bad field"),
        ({"out": "/nonexistent/dir/x.jsonl"}, "--out", "no such directory"),
    ],
)
def test_training_usage_errors(extra, option, reason, tmp_path: Path, capsys) -> None:
    cfg_path = _config(tmp_path, **extra.get("cfg", {}))
    args = {"rank": "0", "config": str(cfg_path), "out": str(tmp_path / "o.jsonl")}
    args.update({k: v for k, v in extra.items() if k != "cfg"})
    argv = [x for k, v in args.items() for x in (f"--{k}", v)]
    assert training.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and reason in err, err


def test_raw_sender_with_qdisc_bypass_opens():
    """The bypass option set the socket option through socket.SOL_PACKET, which Python
    3.11 does not define: it raised AttributeError before it could be used."""
    import os

    from traffic.rawsock import RawSender

    if os.geteuid() != 0:
        pytest.skip("needs root for a packet socket")
    with RawSender("lo", qdisc_bypass=True) as sender:
        assert sender.sock.fileno() >= 0
