"""Independent checks: Scapy's MACsec both ways, tshark dissection, fuzzed receive path."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.macsec import RX_DELIVERED, RX_DISPOSITIONS, CipherSuite, SecY, make_sci

scapy_macsec = pytest.importorskip("scapy.contrib.macsec")
from scapy.layers.inet import ICMP, IP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402
from scapy.utils import wrpcap  # noqa: E402

KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
SCI_A = make_sci("02:00:00:00:00:0a")
SCI_B = make_sci("02:00:00:00:00:0b")


def icmp_frame(n: int = 64) -> bytes:
    pkt = (Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
           / IP(src="10.99.0.1", dst="10.99.0.2") / ICMP() / Raw(bytes(n)))
    return bytes(pkt)


CASES = [(CipherSuite.GCM_AES_128, True), (CipherSuite.GCM_AES_128, False),
         (CipherSuite.GCM_AES_256, True), (CipherSuite.GCM_AES_256, False)]


def _key(suite: CipherSuite) -> bytes:
    return (KEY * 2)[: suite.key_len]


@pytest.mark.parametrize(("suite", "encrypt"), CASES)
@pytest.mark.parametrize("size", [0, 20, 1400])
def test_ours_decrypts_with_scapy(suite: CipherSuite, encrypt: bool, size: int) -> None:
    tx = SecY(SCI_A, suite, encrypt=encrypt)
    tx.add_tx_sa(1, _key(suite), next_pn=77)
    plain = icmp_frame(size)
    wire = tx.protect(plain)
    sa = scapy_macsec.MACsecSA(sci=SCI_A, an=1, pn=77, key=_key(suite), icvlen=16,
                               encrypt=int(encrypt), send_sci=1)
    pkt = Ether(wire)
    assert pkt[scapy_macsec.MACsec].PN == 77 and pkt[scapy_macsec.MACsec].AN == 1
    assert bytes(sa.decap(sa.decrypt(pkt))) == plain


@pytest.mark.parametrize(("suite", "encrypt"), CASES)
@pytest.mark.parametrize("send_sci", [1, 0])
def test_scapy_frames_validate_with_ours(suite: CipherSuite, encrypt: bool, send_sci: int) -> None:
    sa = scapy_macsec.MACsecSA(sci=SCI_A, an=2, pn=1000, key=_key(suite), icvlen=16,
                               encrypt=int(encrypt), send_sci=send_sci)
    rx = SecY(SCI_B, suite)
    rx.add_rx_sa(SCI_A, 2, _key(suite), next_pn=1000)
    for i in range(3):
        sa.pn = 1000 + i
        plain = icmp_frame(30 * i)
        wire = bytes(sa.encrypt(sa.encap(Ether(plain))))
        assert rx.validate(wire) == plain
    assert rx.counters.InPktsOK == 3


def test_scapy_xpn_interop() -> None:
    suite, salt, ssci = CipherSuite.GCM_AES_XPN_128, bytes(range(12)), 7
    pn = (5 << 32) + 9
    tx = SecY(SCI_A, suite)
    tx.add_tx_sa(0, KEY, next_pn=pn, ssci=ssci, salt=salt)
    sa = scapy_macsec.MACsecSA(sci=SCI_A, an=0, pn=pn, key=KEY, icvlen=16, encrypt=1,
                               send_sci=1, xpn_en=True, ssci=ssci, salt=salt)
    plain = icmp_frame(100)
    assert bytes(sa.decap(sa.decrypt(Ether(tx.protect(plain))))) == plain


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
@pytest.mark.parametrize("encrypt", [True, False])
def test_tshark_dissects_our_frames(tmp_path: Path, encrypt: bool) -> None:
    tx = SecY(SCI_A, encrypt=encrypt)
    tx.add_tx_sa(0, KEY)
    frames = [Ether(tx.protect(icmp_frame(n))) for n in (0, 10, 40, 200, 1400)]
    pcap = tmp_path / "macsec.pcap"
    wrpcap(str(pcap), frames)
    out = subprocess.run(["tshark", "-r", str(pcap), "-V"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.count("802.1AE Security tag") == len(frames), out[:2000]
    assert "Malformed" not in out and "Expert Info (Error" not in out
    fields = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "macsec.AN", "-e", "macsec.PN",
         "-e", "macsec.SCI.system_identifier"],
        capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    assert int(fields[0].split("\t")[0], 0) == 0 and fields[0].split("\t")[1] == "1"
    assert fields[4].split("\t")[1] == "5"
    if not encrypt:  # integrity only: the payload is dissected as IPv4/ICMP
        assert "Internet Control Message Protocol" in out


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    buf = bytearray(frame)
    op = rng.randrange(8)
    if op == 0:
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op == 1:
        del buf[rng.randrange(len(buf) + 1):]
    elif op == 2:
        buf += rng.randbytes(rng.randint(1, 40))
    elif op == 3:
        buf[14] = rng.randrange(256)
    elif op == 4:
        buf[15] = rng.randrange(256)
    elif op == 5:
        buf[16:20] = rng.randbytes(4)
    elif op == 6:
        buf = bytearray(rng.randbytes(rng.randint(0, 80)))
        if len(buf) > 14 and rng.random() < 0.7:
            buf[12:14] = b"\x88\xe5"
    else:
        pass  # an unchanged copy: a replay
    return bytes(buf)


@pytest.mark.parametrize("mode", ["strict", "check", "disabled"])
@pytest.mark.parametrize("encrypt", [True, False])
def test_fuzz_receive_path_counts_everything(mode: str, encrypt: bool) -> None:
    rng = random.Random(f"macsec-{mode}-{encrypt}")
    tx = SecY(SCI_A, encrypt=encrypt, include_sci=rng.random() < 0.5)
    tx.add_tx_sa(0, KEY)
    rx = SecY(SCI_B, validate=mode, replay_window=rng.choice([0, 16]))
    rx.add_rx_sa(SCI_A, 0, KEY)
    plains = {icmp_frame(n) for n in (0, 5, 50, 300)}
    originals = [(p, tx.protect(p)) for p in sorted(plains) for _ in range(5)]
    delivered = 0
    n = 3000
    for i in range(n):
        plain, wire = rng.choice(originals)
        out = rx.validate(_mutate(rng, wire))
        if out is not None:
            delivered += 1
            if mode == "strict":
                assert out in plains, "strict mode delivered a frame that is not authentic"
        assert rx.counters.rx_total() == i + 1
    assert sum(getattr(rx.counters, k) for k in RX_DELIVERED) == delivered
    assert set(RX_DELIVERED) <= set(RX_DISPOSITIONS)
