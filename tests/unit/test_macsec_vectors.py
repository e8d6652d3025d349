"""IEEE 802.1AE Annex C test vectors, byte for byte, in both directions.

Source: IEEE Std 802.1AE-2018 Annex C (first published in 802.1AEbn-2011 and
802.1AEbw-2013): C.1 "54-octet frame integrity protection" (C.1.1 GCM-AES-128,
C.1.2 GCM-AES-256, C.1.3 GCM-AES-XPN-128, C.1.4 GCM-AES-XPN-256) and C.5
"54-octet frame confidentiality protection" (C.5.1 .. C.5.4). The hex strings
were checked against the copies in scapy's test/contrib/macsec.uts.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from testbed.macsec import CipherSuite, SecY, parse
from testbed.macsec.cipher import SaKey

KEY_128_C1 = bytes.fromhex("AD7A2BD03EAC835A6F620FDCB506B345")
KEY_256_C1 = bytes.fromhex("E3C08A8F06C6E3AD95A70557B23F75483CE33021A9C72B7025666204C69C0B72")
KEY_128_C5 = bytes.fromhex("071B113B0CA743FECCCF3D051F737382")
KEY_256_C5 = bytes.fromhex("691D3EE909D7F54167FD1CA0B5D769081F2BDE1AEE655FDBAB80BD5295AE6BE7")
SSCI = 0x7A30C118
SALT = bytes.fromhex("E630E81A48DE86A21C66FA6D")

# C.1: DA D609B1F05663, SA 7A0D46DF998D, SCI 12153524C0895E81, AN 2, SC=1.
C1_PLAIN = bytes.fromhex(
    "D609B1F056637A0D46DF998D0800"
    "0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F30313233340001"
)
C1_HDR = "D609B1F056637A0D46DF998D88E5222AB2C2846512153524C0895E81"
C1_BODY = "08000F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F30313233340001"
# C.5: DA E20106D7CD0D, SA F0761E8DCD3D, SCI F0761E8DCD3D0001 (ES=1, SC=0), AN 0.
C5_PLAIN = bytes.fromhex(
    "E20106D7CD0DF0761E8DCD3D0800"
    "0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F30313233340004"
)


@dataclass(frozen=True)
class Vector:
    name: str
    suite: CipherSuite
    key: bytes
    sci: bytes
    an: int
    pn: int
    encrypt: bool
    plain: bytes
    protected: bytes
    iv: str


VECTORS = [
    Vector("C.1.1 GCM-AES-128 integrity", CipherSuite.GCM_AES_128, KEY_128_C1,
           bytes.fromhex("12153524C0895E81"), 2, 0xB2C28465, False, C1_PLAIN,
           bytes.fromhex(C1_HDR + C1_BODY + "F09478A9B09007D06F46E9B6A1DA25DD"),
           "12153524C0895E81B2C28465"),
    Vector("C.1.2 GCM-AES-256 integrity", CipherSuite.GCM_AES_256, KEY_256_C1,
           bytes.fromhex("12153524C0895E81"), 2, 0xB2C28465, False, C1_PLAIN,
           bytes.fromhex(C1_HDR + C1_BODY + "2F0BC5AF409E06D609EA8B7D0FA5EA50"),
           "12153524C0895E81B2C28465"),
    Vector("C.1.3 GCM-AES-XPN-128 integrity", CipherSuite.GCM_AES_XPN_128, KEY_128_C1,
           bytes.fromhex("12153524C0895E81"), 2, 0xB0DF459CB2C28465, False, C1_PLAIN,
           bytes.fromhex(C1_HDR + C1_BODY + "17FE1981EBDD4AFC5062697E8BAA0C23"),
           "9C002902F801C33EAEA47E08"),
    Vector("C.1.4 GCM-AES-XPN-256 integrity", CipherSuite.GCM_AES_XPN_256, KEY_256_C1,
           bytes.fromhex("12153524C0895E81"), 2, 0xB0DF459CB2C28465, False, C1_PLAIN,
           bytes.fromhex(C1_HDR + C1_BODY + "4DBD2F6A754A6CF728CC129BA6931577"),
           "9C002902F801C33EAEA47E08"),
    Vector("C.5.1 GCM-AES-128 confidentiality", CipherSuite.GCM_AES_128, KEY_128_C5,
           bytes.fromhex("F0761E8DCD3D0001"), 0, 0x76D457ED, True, C5_PLAIN,
           bytes.fromhex(
               "E20106D7CD0DF0761E8DCD3D88E54C2A76D457ED13B4C72B389DC5018E72A171DD85A5D3"
               "752274D3A019FBCAED09A425CD9B2E1C9B72EEE7C9DE7D52B3F3D6A5284F4A6D3FE22A5D"
               "6C2B960494C3"),
           "F0761E8DCD3D000176D457ED"),
    Vector("C.5.2 GCM-AES-256 confidentiality", CipherSuite.GCM_AES_256, KEY_256_C5,
           bytes.fromhex("F0761E8DCD3D0001"), 0, 0x76D457ED, True, C5_PLAIN,
           bytes.fromhex(
               "E20106D7CD0DF0761E8DCD3D88E54C2A76D457EDC1623F55730C93533097ADDAD2566496"
               "6125352B43ADACBD61C5EF3AC90B5BEE929CE4630EA79F6CE51912AF39C2D1FDC2051F8B"
               "7B3C9D397EF2"),
           "F0761E8DCD3D000176D457ED"),
    Vector("C.5.3 GCM-AES-XPN-128 confidentiality", CipherSuite.GCM_AES_XPN_128, KEY_128_C5,
           bytes.fromhex("F0761E8DCD3D0001"), 0, 0xB0DF459C76D457ED, True, C5_PLAIN,
           bytes.fromhex(
               "E20106D7CD0DF0761E8DCD3D88E54C2A76D457ED9CA46984430203ED416EBDC2FE2622BA"
               "3E5EAB6961C36383009E187E9B0C88564653B9ABD216441C6AB6F0A232E9E44C978CF7CD"
               "84D43484D101"),
           "9C002902F801C33E6AB2AD80"),
    Vector("C.5.4 GCM-AES-XPN-256 confidentiality", CipherSuite.GCM_AES_XPN_256, KEY_256_C5,
           bytes.fromhex("F0761E8DCD3D0001"), 0, 0xB0DF459C76D457ED, True, C5_PLAIN,
           bytes.fromhex(
               "E20106D7CD0DF0761E8DCD3D88E54C2A76D457ED88D9F7D1F1578EE34BA7B1ABC89893EF"
               "1D3398C9F1DD3E47FBD8553E0FF786EF5699EB01EA10420D0EBD39A0E273C4C7F95ED843"
               "207D7A497DFA"),
           "9C002902F801C33E6AB2AD80"),
]
IDS = [v.name for v in VECTORS]


def _xpn_args(v: Vector) -> dict[str, object]:
    return {"ssci": SSCI, "salt": SALT} if v.suite.xpn else {}


def _sender(v: Vector) -> SecY:
    es = v.name.startswith("C.5")
    secy = SecY(v.sci, v.suite, encrypt=v.encrypt, include_sci=not es, end_station=es)
    secy.add_tx_sa(v.an, v.key, next_pn=v.pn, **_xpn_args(v))
    return secy


def _receiver(v: Vector) -> SecY:
    secy = SecY(bytes.fromhex("0000000000000099"), v.suite)
    secy.add_rx_sa(v.sci, v.an, v.key, next_pn=v.pn, **_xpn_args(v))
    return secy


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_iv(v: Vector) -> None:
    key = SaKey(v.suite, v.key, **_xpn_args(v))
    assert key.iv(v.sci, v.pn).hex().upper() == v.iv


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_encode_exact_bytes(v: Vector) -> None:
    secy = _sender(v)
    assert secy.protect(v.plain).hex().upper() == v.protected.hex().upper()
    key = "OutPktsEncrypted" if v.encrypt else "OutPktsProtected"
    assert getattr(secy.counters, key) == 1
    assert secy.tx_sas[v.an].next_pn == v.pn + 1


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_decode_exact_plaintext(v: Vector) -> None:
    secy = _receiver(v)
    assert secy.validate(v.protected) == v.plain
    assert secy.counters.InPktsOK == 1
    octets = "InOctetsDecrypted" if v.encrypt else "InOctetsValidated"
    assert getattr(secy.counters, octets) == len(v.plain) - 12


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_tag_fields(v: Vector) -> None:
    tag = parse(v.protected).tag
    assert (tag.an, tag.e, tag.c) == (v.an, v.encrypt, v.encrypt)
    assert tag.pn == v.pn & 0xFFFFFFFF
    assert tag.sci == (None if v.name.startswith("C.5") else v.sci)


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
@pytest.mark.parametrize("where", [0, 5, 12, 16, 30, -1])
def test_any_flipped_bit_is_not_valid(v: Vector, where: int) -> None:
    bad = bytearray(v.protected)
    bad[where] ^= 0x01
    secy = _receiver(v)
    assert secy.validate(bytes(bad)) is None
    assert secy.counters.InPktsOK == 0
    assert secy.counters.rx_total() == 1
