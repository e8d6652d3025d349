"""IEEE 802.1AE Annex C test vectors, byte for byte, in both directions.

Source: IEEE Std 802.1AE-2018 Annex C. The GCM-AES-128/256 sets were first
published as IEEE 802.1 "bn-randall-test-vectors-0511-v1" sections 2.1 .. 2.8
(for 802.1AEbn-2011), the GCM-AES-XPN sets by 802.1AEbw-2013. Covered here:

* C.1 54-octet frame integrity protection: C.1.1 GCM-AES-128, C.1.2 GCM-AES-256
  (bn-randall 2.1.1, 2.1.2), C.1.3 GCM-AES-XPN-128, C.1.4 GCM-AES-XPN-256;
* C.2 60-octet frame integrity protection: C.2.1, C.2.2 (bn-randall 2.3.1, 2.3.2);
* C.3 65-octet frame integrity protection: C.3.1, C.3.2 (bn-randall 2.5.1, 2.5.2);
* C.4 79-octet frame integrity protection: C.4.1, C.4.2 (bn-randall 2.7.1, 2.7.2);
* C.5 54-octet frame confidentiality protection: C.5.1, C.5.2 (bn-randall 2.4.1,
  2.4.2), C.5.3 GCM-AES-XPN-128, C.5.4 GCM-AES-XPN-256;
* C.6 60-octet frame confidentiality protection: C.6.1, C.6.2 (bn-randall 2.2.1, 2.2.2);
* C.7 61-octet frame confidentiality protection: C.7.1, C.7.2 (bn-randall 2.6.1, 2.6.2);
* C.8 75-octet frame confidentiality protection: C.8.1, C.8.2 (bn-randall 2.8.1, 2.8.2).

In C.2 .. C.4 and C.6 .. C.8, x.1 is GCM-AES-128 and x.2 is GCM-AES-256; their
GCM-XPN variants (x.3, x.4) are not covered. The C.1 and C.5 frame-level hex was
checked against the copies in scapy's test/contrib/macsec.uts. The other sets are
written at the GCM level as bn-randall gives them (key, IV = SCI || PN, AAD,
plaintext, ciphertext || ICV) and turned into frames by :func:`_from_gcm`; their
hex was cross-checked against independent public copies of that document (all twelve
against one copy, the GCM-AES-256 ones against a second) and against plain AES-GCM.
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
# bn-randall 2.5 / 2.6 (Annex C.3 / C.7) and 2.7 / 2.8 (Annex C.4 / C.8).
KEY_128_C3 = bytes.fromhex("013FE00B5F11BE7F866D0CBBC55A7A90")
KEY_256_C3 = bytes.fromhex("83C093B58DE7FFE1C0DA926AC43FB3609AC1C80FEE1B624497EF942E2F79A823")
KEY_128_C4 = bytes.fromhex("88EE087FD95DA9FBF6725AA9D757B0CD")
KEY_256_C4 = bytes.fromhex("4C973DBC7364621674F8B5B89E5C15511FCED9216490FB1C1A2CAA0FFE0407E5")
SSCI = 0x7A30C118
SALT = bytes.fromhex("E630E81A48DE86A21C66FA6D")

TCI_ES, TCI_SC, TCI_E, TCI_C, AN_MASK = 0x40, 0x20, 0x08, 0x04, 0x03

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
    """A frame-level vector; ``tci`` is the TCI/AN octet of the published SecTAG."""

    name: str
    suite: CipherSuite
    key: bytes
    sci: bytes
    pn: int
    tci: int
    plain: bytes
    protected: bytes
    iv: str

    @property
    def an(self) -> int:
        return self.tci & AN_MASK

    @property
    def encrypt(self) -> bool:
        return bool(self.tci & TCI_E)

    @property
    def include_sci(self) -> bool:
        return bool(self.tci & TCI_SC)

    @property
    def end_station(self) -> bool:
        return bool(self.tci & TCI_ES)


FRAME_VECTORS = [
    Vector(
        "C.1.1 54-octet integrity GCM-AES-128",
        CipherSuite.GCM_AES_128, KEY_128_C1,
        bytes.fromhex("12153524C0895E81"), 0xB2C28465, 0x22, C1_PLAIN,
        bytes.fromhex(C1_HDR + C1_BODY + "F09478A9B09007D06F46E9B6A1DA25DD"),
        "12153524C0895E81B2C28465"),
    Vector(
        "C.1.2 54-octet integrity GCM-AES-256",
        CipherSuite.GCM_AES_256, KEY_256_C1,
        bytes.fromhex("12153524C0895E81"), 0xB2C28465, 0x22, C1_PLAIN,
        bytes.fromhex(C1_HDR + C1_BODY + "2F0BC5AF409E06D609EA8B7D0FA5EA50"),
        "12153524C0895E81B2C28465"),
    Vector(
        "C.1.3 54-octet integrity GCM-AES-XPN-128",
        CipherSuite.GCM_AES_XPN_128, KEY_128_C1,
        bytes.fromhex("12153524C0895E81"), 0xB0DF459CB2C28465, 0x22, C1_PLAIN,
        bytes.fromhex(C1_HDR + C1_BODY + "17FE1981EBDD4AFC5062697E8BAA0C23"),
        "9C002902F801C33EAEA47E08"),
    Vector(
        "C.1.4 54-octet integrity GCM-AES-XPN-256",
        CipherSuite.GCM_AES_XPN_256, KEY_256_C1,
        bytes.fromhex("12153524C0895E81"), 0xB0DF459CB2C28465, 0x22, C1_PLAIN,
        bytes.fromhex(C1_HDR + C1_BODY + "4DBD2F6A754A6CF728CC129BA6931577"),
        "9C002902F801C33EAEA47E08"),
    Vector(
        "C.5.1 54-octet confidentiality GCM-AES-128",
        CipherSuite.GCM_AES_128, KEY_128_C5,
        bytes.fromhex("F0761E8DCD3D0001"), 0x76D457ED, 0x4C, C5_PLAIN,
        bytes.fromhex(
            "E20106D7CD0DF0761E8DCD3D88E54C2A76D457ED13B4C72B389DC5018E72A171DD85A5D3"
            "752274D3A019FBCAED09A425CD9B2E1C9B72EEE7C9DE7D52B3F3D6A5284F4A6D3FE22A5D"
            "6C2B960494C3"),
        "F0761E8DCD3D000176D457ED"),
    Vector(
        "C.5.2 54-octet confidentiality GCM-AES-256",
        CipherSuite.GCM_AES_256, KEY_256_C5,
        bytes.fromhex("F0761E8DCD3D0001"), 0x76D457ED, 0x4C, C5_PLAIN,
        bytes.fromhex(
            "E20106D7CD0DF0761E8DCD3D88E54C2A76D457EDC1623F55730C93533097ADDAD2566496"
            "6125352B43ADACBD61C5EF3AC90B5BEE929CE4630EA79F6CE51912AF39C2D1FDC2051F8B"
            "7B3C9D397EF2"),
        "F0761E8DCD3D000176D457ED"),
    Vector(
        "C.5.3 54-octet confidentiality GCM-AES-XPN-128",
        CipherSuite.GCM_AES_XPN_128, KEY_128_C5,
        bytes.fromhex("F0761E8DCD3D0001"), 0xB0DF459C76D457ED, 0x4C, C5_PLAIN,
        bytes.fromhex(
            "E20106D7CD0DF0761E8DCD3D88E54C2A76D457ED9CA46984430203ED416EBDC2FE2622BA"
            "3E5EAB6961C36383009E187E9B0C88564653B9ABD216441C6AB6F0A232E9E44C978CF7CD"
            "84D43484D101"),
        "9C002902F801C33E6AB2AD80"),
    Vector(
        "C.5.4 54-octet confidentiality GCM-AES-XPN-256",
        CipherSuite.GCM_AES_XPN_256, KEY_256_C5,
        bytes.fromhex("F0761E8DCD3D0001"), 0xB0DF459C76D457ED, 0x4C, C5_PLAIN,
        bytes.fromhex(
            "E20106D7CD0DF0761E8DCD3D88E54C2A76D457ED88D9F7D1F1578EE34BA7B1ABC89893EF"
            "1D3398C9F1DD3E47FBD8553E0FF786EF5699EB01EA10420D0EBD39A0E273C4C7F95ED843"
            "207D7A497DFA"),
        "9C002902F801C33E6AB2AD80"),
]


@dataclass(frozen=True)
class GcmVector:
    """One bn-randall section as published: GCM inputs and output."""

    name: str
    suite: CipherSuite
    key: bytes
    iv: str  # SCI || PN
    aad: str
    plaintext: str  # empty for the integrity-only sets
    ct_icv: str  # ciphertext || ICV (just the ICV for integrity-only sets)


def _from_gcm(g: GcmVector) -> Vector:
    """Turn a GCM-level vector into a frame-level one.

    Integrity only: AAD = DA SA SecTAG user-data, ICV = tag. Confidentiality:
    AAD = DA SA SecTAG, plaintext = user data, ciphertext || ICV follows the SecTAG.
    """
    aad, iv = bytes.fromhex(g.aad), bytes.fromhex(g.iv)
    assert aad[12:14] == b"\x88\xe5"
    tci = aad[14]
    hdr_len = 12 + (16 if tci & TCI_SC else 8)
    sci, pn = iv[:8], int.from_bytes(iv[8:], "big")
    assert aad[16:20] == iv[8:], "IV must end with the SecTAG's PN"
    if tci & TCI_SC:
        assert aad[20:28] == sci, "IV must start with the SecTAG's SCI"
    else:
        assert tci & TCI_ES and sci == aad[6:12] + b"\x00\x01", "ES: SCI = SA || 0001"
    if tci & TCI_E:
        assert len(aad) == hdr_len
        user = bytes.fromhex(g.plaintext)
    else:
        assert not g.plaintext
        user = aad[hdr_len:]
    assert aad[15] == (len(user) if len(user) < 48 else 0), "SL"
    return Vector(g.name, g.suite, g.key, sci, pn, tci, aad[:12] + user,
                  aad + bytes.fromhex(g.ct_icv), g.iv)


# bn-randall-test-vectors-0511-v1, GCM level. Sets sharing DA/SA/SecTAG/data
# share their AAD, IV and plaintext.
C2_IV = "F0761E8DCD3D000176D457ED"  # 2.3 60-byte auth: ES=1, SC=0, AN 0
C2_AAD = (
    "E20106D7CD0DF0761E8DCD3D88E54000"
    "76D457ED08000F101112131415161718"
    "191A1B1C1D1E1F202122232425262728"
    "292A2B2C2D2E2F303132333435363738"
    "393A0003"
)
C3_IV = "7CFDE9F9E33724C68932D612"  # 2.5 65-byte auth: SC=1, AN 3
C3_AAD = (
    "84C5D513D2AAF6E5BBD2727788E52300"
    "8932D6127CFDE9F9E33724C608000F10"
    "1112131415161718191A1B1C1D1E1F20"
    "2122232425262728292A2B2C2D2E2F30"
    "3132333435363738393A3B3C3D3E3F00"
    "05"
)
C4_IV = "7AE8E2CA4EC500012E58495C"  # 2.7 79-byte auth: ES=1, SC=0, AN 1
C4_AAD = (
    "68F2E77696CE7AE8E2CA4EC588E54100"
    "2E58495C08000F101112131415161718"
    "191A1B1C1D1E1F202122232425262728"
    "292A2B2C2D2E2F303132333435363738"
    "393A3B3C3D3E3F404142434445464748"
    "494A4B4C4D0007"
)
C6_IV = "12153524C0895E81B2C28465"  # 2.2 60-byte crypt: SC=1, E=C=1, AN 2
C6_AAD = "D609B1F056637A0D46DF998D88E52E00" "B2C2846512153524C0895E81"
C6_PT = (
    "08000F101112131415161718191A1B1C"
    "1D1E1F202122232425262728292A2B2C"
    "2D2E2F303132333435363738393A0002"
)
C7_IV = C3_IV  # 2.6 61-byte crypt: SC=1, E=C=1, AN 3
C7_AAD = "84C5D513D2AAF6E5BBD2727788E52F00" "8932D6127CFDE9F9E33724C6"
C7_PT = (
    "08000F101112131415161718191A1B1C"
    "1D1E1F202122232425262728292A2B2C"
    "2D2E2F303132333435363738393A3B00"
    "06"
)
C8_IV = C4_IV  # 2.8 75-byte crypt: ES=1, SC=0, E=C=1, AN 1
C8_AAD = "68F2E77696CE7AE8E2CA4EC588E54D00" "2E58495C"
C8_PT = (
    "08000F101112131415161718191A1B1C"
    "1D1E1F202122232425262728292A2B2C"
    "2D2E2F303132333435363738393A3B3C"
    "3D3E3F404142434445464748490008"
)

GCM_VECTORS = [
    GcmVector("C.2.1 60-octet integrity GCM-AES-128", CipherSuite.GCM_AES_128, KEY_128_C5,
              C2_IV, C2_AAD, "", "0C017BC73B227DFCC9BAFA1C41ACC353"),
    GcmVector("C.2.2 60-octet integrity GCM-AES-256", CipherSuite.GCM_AES_256, KEY_256_C5,
              C2_IV, C2_AAD, "", "35217C774BBC31B63166BCF9D4ABED07"),
    GcmVector("C.3.1 65-octet integrity GCM-AES-128", CipherSuite.GCM_AES_128, KEY_128_C3,
              C3_IV, C3_AAD, "", "217867E50C2DAD74C28C3B50ABDF695A"),
    GcmVector("C.3.2 65-octet integrity GCM-AES-256", CipherSuite.GCM_AES_256, KEY_256_C3,
              C3_IV, C3_AAD, "", "6EE160E8FAECA4B36C86B234920CA975"),
    GcmVector("C.4.1 79-octet integrity GCM-AES-128", CipherSuite.GCM_AES_128, KEY_128_C4,
              C4_IV, C4_AAD, "", "07922B8EBCF10BB2297588CA4C614523"),
    GcmVector("C.4.2 79-octet integrity GCM-AES-256", CipherSuite.GCM_AES_256, KEY_256_C4,
              C4_IV, C4_AAD, "", "00BDA1B7E87608BCBF470F12157F4C07"),
    GcmVector("C.6.1 60-octet confidentiality GCM-AES-128", CipherSuite.GCM_AES_128,
              KEY_128_C1, C6_IV, C6_AAD, C6_PT,
              "701AFA1CC039C0D765128A665DAB6924"
              "3899BF7318CCDC81C9931DA17FBE8EDD"
              "7D17CB8B4C26FC81E3284F2B7FBA713D"
              "4F8D55E7D3F06FD5A13C0C29B9D5B880"),
    GcmVector("C.6.2 60-octet confidentiality GCM-AES-256", CipherSuite.GCM_AES_256,
              KEY_256_C1, C6_IV, C6_AAD, C6_PT,
              "E2006EB42F5277022D9B19925BC419D7"
              "A592666C925FE2EF718EB4E308EFEAA7"
              "C5273B394118860A5BE2A97F56AB7836"
              "5CA597CDBB3EDB8D1A1151EA0AF7B436"),
    GcmVector("C.7.1 61-octet confidentiality GCM-AES-128", CipherSuite.GCM_AES_128,
              KEY_128_C3, C7_IV, C7_AAD, C7_PT,
              "3A4DE6FA32191014DBB303D92EE3A9E8"
              "A1B599C14D22FB080096E13811816A3C"
              "9C9BCF7C1B9B96DA809204E29D0E2A76"
              "42"
              "BFD310A4837C816CCFA5AC23AB003988"),
    GcmVector("C.7.2 61-octet confidentiality GCM-AES-256", CipherSuite.GCM_AES_256,
              KEY_256_C3, C7_IV, C7_AAD, C7_PT,
              "110222FF8050CBECE66A813AD09A73ED"
              "7A9A089C106B959389168ED6E8698EA9"
              "02EB1277DBEC2E68E473155A15A7DAEE"
              "D4"
              "A10F4E05139C23DF00B3AADC71F0596A"),
    GcmVector("C.8.1 75-octet confidentiality GCM-AES-128", CipherSuite.GCM_AES_128,
              KEY_128_C4, C8_IV, C8_AAD, C8_PT,
              "C31F53D99E5687F7365119B832D2AAE7"
              "0741D593F1F9E2AB3455779B078EB8FE"
              "ACDFEC1F8E3E5277F8180B43361F6512"
              "ADB16D2E38548A2C719DBA7228D840"
              "88F8757ADB8AA788D8F65AD668BE70E7"),
    GcmVector("C.8.2 75-octet confidentiality GCM-AES-256", CipherSuite.GCM_AES_256,
              KEY_256_C4, C8_IV, C8_AAD, C8_PT,
              "BA8AE31BC506486D6873E4FCE460E7DC"
              "57591FF00611F31C3834FE1C04AD80B6"
              "6803AFCF5B27E6333FA67C99DA47C2F0"
              "CED68D531BD741A943CFF7A6713BD0"
              "2611CD7DAA01D61C5C886DC1A8170107"),
]

VECTORS = sorted(FRAME_VECTORS + [_from_gcm(g) for g in GCM_VECTORS], key=lambda v: v.name)
IDS = [v.name for v in VECTORS]


def _xpn_args(v: Vector) -> dict[str, object]:
    return {"ssci": SSCI, "salt": SALT} if v.suite.xpn else {}


def _sender(v: Vector) -> SecY:
    secy = SecY(v.sci, v.suite, encrypt=v.encrypt, include_sci=v.include_sci,
                end_station=v.end_station)
    secy.add_tx_sa(v.an, v.key, next_pn=v.pn, **_xpn_args(v))
    return secy


def _receiver(v: Vector) -> SecY:
    secy = SecY(bytes.fromhex("0000000000000099"), v.suite)
    secy.add_rx_sa(v.sci, v.an, v.key, next_pn=v.pn, **_xpn_args(v))
    return secy


def test_all_sections_present() -> None:
    sections = {v.name.split()[0] for v in VECTORS}
    expected = {f"C.{s}.{i}" for s in (1, 5) for i in (1, 2, 3, 4)}
    expected |= {f"C.{s}.{i}" for s in (2, 3, 4, 6, 7, 8) for i in (1, 2)}
    assert sections == expected and len(VECTORS) == len(expected)


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_frame_size(v: Vector) -> None:
    assert f" {len(v.plain)}-octet " in v.name
    assert len(v.protected) == len(v.plain) + (16 if v.include_sci else 8) + 16


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_iv(v: Vector) -> None:
    key = SaKey(v.suite, v.key, **_xpn_args(v))
    assert key.iv(v.sci, v.pn).hex().upper() == v.iv


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_encode_exact_bytes(v: Vector) -> None:
    secy = _sender(v)
    assert secy.protect(v.plain).hex().upper() == v.protected.hex().upper()
    key = "OutPktsEncrypted" if v.encrypt else "OutPktsProtected"
    other = "OutPktsProtected" if v.encrypt else "OutPktsEncrypted"
    assert getattr(secy.counters, key) == 1
    assert getattr(secy.counters, other) == 0
    assert secy.tx_sas[v.an].next_pn == v.pn + 1


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_decode_exact_plaintext(v: Vector) -> None:
    secy = _receiver(v)
    assert secy.validate(v.protected) == v.plain
    assert secy.counters.InPktsOK == 1
    assert secy.counters.rx_total() == 1
    octets = "InOctetsDecrypted" if v.encrypt else "InOctetsValidated"
    assert getattr(secy.counters, octets) == len(v.plain) - 12


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_tag_fields(v: Vector) -> None:
    tag = parse(v.protected).tag
    assert tag.tci == v.tci == v.protected[14]
    assert (tag.an, tag.e, tag.c, tag.es) == (v.an, v.encrypt, v.encrypt, v.end_station)
    assert tag.pn == v.pn & 0xFFFFFFFF
    assert tag.sci == (v.sci if v.include_sci else None)
    user_len = len(v.plain) - 12
    assert tag.sl == (user_len if user_len < 48 else 0)


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
@pytest.mark.parametrize("bit", [0, 7])
def test_flipped_icv_bit_is_not_valid(v: Vector, bit: int) -> None:
    for where in (-16, -1):
        bad = bytearray(v.protected)
        bad[where] ^= 1 << bit
        secy = _receiver(v)
        assert secy.validate(bytes(bad)) is None
        assert secy.counters.InPktsNotValid == 1
        assert secy.counters.InPktsOK == 0
        assert secy.counters.rx_total() == 1
        assert secy.rx_scs[v.sci].sas[v.an].next_pn == v.pn  # a forgery moves nothing


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
@pytest.mark.parametrize("where", [0, 5, 12, 16, 30, -1])
def test_any_flipped_bit_is_not_valid(v: Vector, where: int) -> None:
    bad = bytearray(v.protected)
    bad[where] ^= 0x01
    secy = _receiver(v)
    assert secy.validate(bytes(bad)) is None
    assert secy.counters.InPktsOK == 0
    assert secy.counters.rx_total() == 1
