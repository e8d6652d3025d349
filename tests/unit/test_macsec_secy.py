"""SecY behaviour: validation modes, replay window, SC/SA lookup, rotation, errors."""

from __future__ import annotations

import pytest

from testbed.macsec import (
    CipherSuite,
    ConfigError,
    FrameError,
    SecTag,
    SecY,
    TransmitError,
    ValidateFrames,
    make_sci,
)
from testbed.macsec.frame import parse

KEY = bytes(range(16))
KEY2 = bytes(range(16, 32))
SCI_A = make_sci("02:00:00:00:00:0a")
SCI_B = make_sci("02:00:00:00:00:0b")
PLAIN = bytes.fromhex("02000000000b02000000000a0800") + bytes(range(60))


def pair(encrypt: bool = True, mode: str = "strict", window: int = 0,
         suite: CipherSuite = CipherSuite.GCM_AES_128, pn: int = 1, **kw) -> tuple[SecY, SecY]:
    key = KEY if suite.key_len == 16 else KEY + KEY2
    xpn = {"ssci": 1, "salt": bytes(12)} if suite.xpn else {}
    a = SecY(SCI_A, suite, encrypt=encrypt, **kw)
    a.add_tx_sa(0, key, next_pn=pn, **xpn)
    b = SecY(SCI_B, suite, validate=mode, replay_window=window)
    b.add_rx_sa(SCI_A, 0, key, next_pn=pn, **xpn)
    return a, b


def test_roundtrip_and_counters() -> None:
    a, b = pair()
    for _ in range(5):
        assert b.validate(a.protect(PLAIN)) == PLAIN
    assert a.counters.OutPktsEncrypted == 5 and b.counters.InPktsOK == 5
    assert a.counters.OutOctetsEncrypted == 5 * (len(PLAIN) - 12)
    assert b.rx_scs[SCI_A].sas[0].InPktsOK == 5
    assert b.rx_scs[SCI_A].sas[0].next_pn == 6


@pytest.mark.parametrize("size", [0, 1, 33, 35, 36, 47, 48, 1500])
def test_short_length(size: int) -> None:
    a, b = pair(encrypt=False)
    frame = PLAIN[:14] + bytes(size)
    wire = a.protect(frame)
    user = size + 2
    assert parse(wire).tag.sl == (user if user < 48 else 0)
    assert b.validate(wire) == frame


def test_replay_window_zero_drops_reordered_and_replayed() -> None:
    a, b = pair()
    f1, f2 = a.protect(PLAIN), a.protect(PLAIN)
    assert b.validate(f2) == PLAIN
    assert b.validate(f1) is None
    assert b.validate(f2) is None
    assert (b.counters.InPktsOK, b.counters.InPktsLate) == (1, 2)


def test_replay_window_accepts_reordering_within_window() -> None:
    a, b = pair(window=2)
    frames = [a.protect(PLAIN) for _ in range(5)]
    assert b.validate(frames[4]) == PLAIN
    assert b.validate(frames[3]) == PLAIN  # pn 4 >= lowest 6-2
    assert b.validate(frames[0]) is None  # pn 1 < lowest
    assert (b.counters.InPktsOK, b.counters.InPktsLate) == (2, 1)


def test_replay_protect_off_counts_delayed() -> None:
    a, _ = pair()
    b = SecY(SCI_B, replay_protect=False)
    b.add_rx_sa(SCI_A, 0, KEY)
    f1, f2 = a.protect(PLAIN), a.protect(PLAIN)
    assert b.validate(f2) == PLAIN and b.validate(f1) == PLAIN
    assert (b.counters.InPktsOK, b.counters.InPktsDelayed) == (1, 1)


def tamper(frame: bytes) -> bytes:
    bad = bytearray(frame)
    bad[-20] ^= 0xFF
    return bytes(bad)


def test_strict_tampered_not_valid() -> None:
    a, b = pair(encrypt=False)
    assert b.validate(tamper(a.protect(PLAIN))) is None
    assert b.counters.InPktsNotValid == 1
    assert b.rx_scs[SCI_A].sas[0].InPktsNotValid == 1


def test_check_mode_delivers_invalid_integrity_only_frames() -> None:
    a, b = pair(encrypt=False, mode="check")
    out = b.validate(tamper(a.protect(PLAIN)))
    assert out is not None and out != PLAIN
    assert b.counters.InPktsInvalid == 1


def test_check_mode_drops_invalid_encrypted_frames() -> None:
    a, b = pair(encrypt=True, mode="check")
    assert b.validate(tamper(a.protect(PLAIN))) is None
    assert b.counters.InPktsNotValid == 1


@pytest.mark.parametrize(("encrypt", "mode", "verdict"),
                         [(True, "strict", "InPktsNotValid"), (False, "strict", "InPktsNotValid"),
                          (False, "check", "InPktsInvalid")])
def test_octets_count_before_the_icv_verdict(encrypt: bool, mode: str, verdict: str) -> None:
    """As Linux (macsec_post_decrypt): a frame past the replay check counts its secure
    data's octets whether or not its ICV then verifies."""
    a, b = pair(encrypt=encrypt, mode=mode)
    b.validate(tamper(a.protect(PLAIN)))
    octets = "InOctetsDecrypted" if encrypt else "InOctetsValidated"
    assert getattr(b.counters, verdict) == 1
    assert getattr(b.counters, octets) == len(PLAIN) - 12
    assert getattr(b.rx_scs[SCI_A].counters, octets) == len(PLAIN) - 12


def test_late_frames_and_disabled_mode_count_no_octets() -> None:
    a, b = pair()
    wire = a.protect(PLAIN)
    b.validate(wire)
    b.validate(wire)  # late: dropped before validation
    assert (b.counters.InPktsLate, b.counters.InOctetsDecrypted) == (1, len(PLAIN) - 12)
    a, b = pair(mode="disabled")
    assert b.validate(a.protect(PLAIN)) == PLAIN
    assert (b.counters.InPktsOK, b.counters.InOctetsDecrypted) == (1, 0)


def test_disabled_mode_does_not_check_integrity_only() -> None:
    a, b = pair(encrypt=False, mode="disabled")
    assert b.validate(tamper(a.protect(PLAIN))) is not None
    assert b.counters.InPktsUnchecked == 1


def test_disabled_mode_still_decrypts() -> None:
    a, b = pair(encrypt=True, mode=ValidateFrames.DISABLED)
    assert b.validate(a.protect(PLAIN)) == PLAIN
    assert b.counters.InPktsOK == 1


@pytest.mark.parametrize(("mode", "counter", "delivered"),
                         [("strict", "InPktsNoTag", False), ("check", "InPktsUntagged", True),
                          ("disabled", "InPktsUntagged", True)])
def test_untagged(mode: str, counter: str, delivered: bool) -> None:
    _, b = pair(mode=mode)
    assert (b.validate(PLAIN) == PLAIN) is delivered
    assert getattr(b.counters, counter) == 1


@pytest.mark.parametrize(("encrypt", "mode", "counter"),
                         [(True, "strict", "InPktsNoSCI"), (True, "check", "InPktsNoSCI"),
                          (False, "strict", "InPktsNoSCI"), (False, "check", "InPktsUnknownSCI")])
def test_unknown_sci(encrypt: bool, mode: str, counter: str) -> None:
    a, b = pair(encrypt=encrypt, mode=mode)
    b.add_rx_sc(make_sci("02:00:00:00:00:99"))  # two SCs: no implicit match
    c = SecY(make_sci("02:00:00:00:00:0c"), encrypt=encrypt)
    c.add_tx_sa(0, KEY)
    out = b.validate(c.protect(PLAIN))
    assert getattr(b.counters, counter) == 1
    assert (out == PLAIN) is (counter == "InPktsUnknownSCI")


@pytest.mark.parametrize(("encrypt", "mode", "counter"),
                         [(True, "strict", "InPktsNotUsingSA"),
                          (False, "strict", "InPktsNotUsingSA"),
                          (False, "check", "InPktsUnusedSA")])
def test_sa_not_in_use(encrypt: bool, mode: str, counter: str) -> None:
    a, b = pair(encrypt=encrypt, mode=mode)
    a.add_tx_sa(1, KEY2, use=True)
    out = b.validate(a.protect(PLAIN))
    assert getattr(b.counters, counter) == 1
    assert (out == PLAIN) is (counter == "InPktsUnusedSA")


@pytest.mark.parametrize("suite", list(CipherSuite))
def test_rotation_without_loss(suite: CipherSuite) -> None:
    a, b = pair(suite=suite)
    xpn = {"ssci": 1, "salt": bytes(12)} if suite.xpn else {}
    key2 = (KEY2 * 2)[: suite.key_len]
    in_flight = [a.protect(PLAIN) for _ in range(3)]
    b.add_rx_sa(SCI_A, 1, key2, **xpn)  # receiver first
    a.add_tx_sa(1, key2, **xpn)
    a.set_encoding_sa(1)
    new = [a.protect(PLAIN) for _ in range(3)]
    for frame in new[:1] + in_flight + new[1:]:
        assert b.validate(frame) == PLAIN
    assert b.counters.InPktsOK == 6
    assert [parse(f).tag.an for f in new] == [1, 1, 1]


def test_pn_exhaustion() -> None:
    a, b = pair(pn=0xFFFFFFFF)
    assert b.validate(a.protect(PLAIN)) == PLAIN
    with pytest.raises(TransmitError):
        a.protect(PLAIN)
    assert not a.tx_sas[0].active


@pytest.mark.parametrize("suite", [CipherSuite.GCM_AES_XPN_128, CipherSuite.GCM_AES_XPN_256])
def test_xpn_crosses_32_bit_boundary(suite: CipherSuite) -> None:
    a, b = pair(suite=suite, pn=0xFFFFFFFE)
    for _ in range(4):
        assert b.validate(a.protect(PLAIN)) == PLAIN
    assert b.rx_scs[SCI_A].sas[0].next_pn == 0x100000002
    assert parse(a.protect(PLAIN)).tag.pn == 2


def test_end_station_without_sci() -> None:
    a, b = pair(include_sci=False, end_station=True)
    wire = a.protect(PLAIN)
    assert parse(wire).tag.es and parse(wire).tag.sci is None
    assert b.validate(wire) == PLAIN


@pytest.mark.parametrize("mutate", ["version", "es_sc", "pn0", "sl", "e_no_c", "short"])
def test_bad_tags(mutate: str) -> None:
    a, b = pair()
    wire = bytearray(a.protect(PLAIN[:30]))
    if mutate == "version":
        wire[14] |= 0x80
    elif mutate == "es_sc":
        wire[14] |= 0x40
    elif mutate == "pn0":
        wire[16:20] = bytes(4)
    elif mutate == "sl":
        wire[15] = 3
    elif mutate == "e_no_c":
        wire[14] &= ~0x04
    else:
        wire = wire[:30]
    assert b.validate(bytes(wire)) is None
    assert b.counters.InPktsBadTag == 1 and b.counters.rx_total() == 1


def test_config_errors() -> None:
    with pytest.raises(ConfigError):
        SecY(b"short")
    with pytest.raises(ConfigError):
        SecY(SCI_A, "gcm-aes-512")
    with pytest.raises(ConfigError):
        SecY(SCI_A, include_sci=True, end_station=True)
    secy = SecY(SCI_A, "gcm-aes-256")
    with pytest.raises(ConfigError):
        secy.add_tx_sa(0, KEY)  # 16-byte key for a 256-bit suite
    with pytest.raises(ConfigError):
        secy.add_tx_sa(4, KEY * 2)
    with pytest.raises(ConfigError):
        secy.add_tx_sa(0, KEY * 2, next_pn=0)
    with pytest.raises(ConfigError):
        SecY(SCI_A, "gcm-aes-xpn-128").add_tx_sa(0, KEY)  # no SSCI/salt
    with pytest.raises(ConfigError):
        secy.set_encoding_sa(3)
    with pytest.raises(TransmitError):
        SecY(SCI_A).protect(PLAIN)
    with pytest.raises(FrameError):
        SecY(SCI_A).protect(b"\x00" * 10)


def test_sectag_roundtrip() -> None:
    tag = SecTag(an=3, pn=0xDEADBEEF, sci=SCI_A, e=True, c=True, sl=20)
    assert SecTag.unpack(tag.pack(), 0)[0] == tag
    assert tag.pack()[2] == 0x2F


def test_stats_json_shape() -> None:
    a, b = pair()
    b.validate(a.protect(PLAIN))
    stats = b.stats()
    assert stats["counters"]["InPktsOK"] == 1
    assert stats["rx_scs"][SCI_A.hex()]["sas"]["0"]["InPktsOK"] == 1


XPN_SUITES = [CipherSuite.GCM_AES_XPN_128, CipherSuite.GCM_AES_XPN_256]


@pytest.mark.parametrize("suite", XPN_SUITES)
@pytest.mark.parametrize("start_pn", [1, 0xFFFFFFFE, 0x5_0000_0010])
def test_xpn_replay_counts_late(suite: CipherSuite, start_pn: int) -> None:
    """A replayed XPN frame is InPktsLate (Linux checks the low 32 bits first), not NotValid."""
    a, b = pair(suite=suite, pn=start_pn)
    frames = [a.protect(PLAIN) for _ in range(4)]
    for frame in frames:
        assert b.validate(frame) == PLAIN
    assert b.validate(frames[3]) is None  # the same frame again
    assert b.validate(frames[0]) is None  # an older one
    c = b.counters
    assert (c.InPktsOK, c.InPktsLate, c.InPktsNotValid) == (4, 2, 0)
    assert b.rx_scs[SCI_A].sas[0].next_pn == start_pn + 4


@pytest.mark.parametrize("suite", XPN_SUITES)
def test_xpn_window_and_delayed(suite: CipherSuite) -> None:
    """In the window an XPN frame is accepted; without replay protection a late one is Delayed."""
    a, b = pair(suite=suite, window=2, pn=0x1_0000_0001)
    frames = [a.protect(PLAIN) for _ in range(5)]
    assert b.validate(frames[4]) == PLAIN
    assert b.validate(frames[3]) == PLAIN  # within the window
    assert b.validate(frames[0]) is None  # below it
    assert (b.counters.InPktsOK, b.counters.InPktsLate, b.counters.InPktsNotValid) == (2, 1, 0)
    a, _ = pair(suite=suite, pn=0x1_0000_0001)
    key = KEY if suite.key_len == 16 else KEY + KEY2
    b = SecY(SCI_B, suite, replay_protect=False)
    b.add_rx_sa(SCI_A, 0, key, next_pn=0x1_0000_0001, ssci=1, salt=bytes(12))
    f1, f2 = a.protect(PLAIN), a.protect(PLAIN)
    assert b.validate(f2) == PLAIN and b.validate(f1) == PLAIN
    assert (b.counters.InPktsOK, b.counters.InPktsDelayed) == (1, 1)
