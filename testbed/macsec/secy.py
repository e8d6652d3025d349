"""A userspace MAC Security Entity (SecY, 802.1AE clause 10) with its counters.

The receive path follows 802.1AE 10.6 the way Linux ``drivers/net/macsec.c``
does, so both backends count the same events with the same names. Every frame
given to :meth:`SecY.validate` increments exactly one *disposition* counter
(see :data:`RX_DISPOSITIONS`), which is what makes drop accounting checkable.

>>> key = bytes(range(16))
>>> a = SecY(sci=make_sci("02:00:00:00:00:0a"))
>>> b = SecY(sci=make_sci("02:00:00:00:00:0b"))
>>> a.add_tx_sa(0, key)
>>> b.add_rx_sa(a.sci, 0, key)
>>> plain = bytes.fromhex("02000000000b02000000000a0800") + bytes(50)
>>> wire = a.protect(plain)
>>> b.validate(wire) == plain, b.validate(wire)  # the second copy is a replay
(True, None)
>>> (b.counters.InPktsOK, b.counters.InPktsLate)
(1, 1)
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field, fields
from enum import Enum

from .cipher import CipherSuite, InvalidTag, SaKey
from .errors import ConfigError, FrameError, TransmitError
from .frame import (
    AN_MASK,
    ETH_HLEN,
    ETH_P_MACSEC,
    ICV_LEN,
    SCI_LEN,
    SECTAG_LEN,
    SHORT_LEN_LIMIT,
    TCI_C,
    TCI_E,
    TCI_ES,
    TCI_SC,
    TCI_SCB,
    SecTag,
    make_sci,
)

__all__ = [
    "RX_DISPOSITIONS",
    "RxSA",
    "RxSC",
    "SecY",
    "SecYCounters",
    "TxSA",
    "ValidateFrames",
    "make_sci",
]

_TAG = struct.Struct("!HBBI")


class ValidateFrames(Enum):
    """The validateFrames control (802.1AE 10.7.8); values match ``ip macsec``."""

    DISABLED = "disabled"
    CHECK = "check"
    STRICT = "strict"


@dataclass
class SecYCounters:
    """SecY, transmit-SC and (summed) receive-SC statistics, named as in Linux."""

    # transmit SecY (macsec_dev_stats)
    OutPktsUntagged: int = 0
    OutPktsTooLong: int = 0
    # transmit SC (macsec_tx_sc_stats)
    OutPktsProtected: int = 0
    OutPktsEncrypted: int = 0
    OutOctetsProtected: int = 0
    OutOctetsEncrypted: int = 0
    # receive SecY (macsec_dev_stats)
    InPktsUntagged: int = 0
    InPktsNoTag: int = 0
    InPktsBadTag: int = 0
    InPktsUnknownSCI: int = 0
    InPktsNoSCI: int = 0
    InPktsOverrun: int = 0
    # receive SC (macsec_rx_sc_stats), summed over all receive SCs
    InOctetsValidated: int = 0
    InOctetsDecrypted: int = 0
    InPktsUnchecked: int = 0
    InPktsDelayed: int = 0
    InPktsOK: int = 0
    InPktsInvalid: int = 0
    InPktsLate: int = 0
    InPktsNotValid: int = 0
    InPktsNotUsingSA: int = 0
    InPktsUnusedSA: int = 0

    def as_dict(self) -> dict[str, int]:
        """Plain dict, for JSON."""
        return asdict(self)

    def rx_total(self) -> int:
        """Number of frames the receive path has seen (one disposition each)."""
        return sum(getattr(self, name) for name in RX_DISPOSITIONS)


#: Receive counters of which exactly one is incremented per validated frame.
RX_DISPOSITIONS: tuple[str, ...] = (
    "InPktsUntagged",
    "InPktsNoTag",
    "InPktsBadTag",
    "InPktsUnknownSCI",
    "InPktsNoSCI",
    "InPktsUnchecked",
    "InPktsDelayed",
    "InPktsOK",
    "InPktsInvalid",
    "InPktsLate",
    "InPktsNotValid",
    "InPktsNotUsingSA",
    "InPktsUnusedSA",
)
#: Those of the dispositions that deliver the frame to the controlled port.
RX_DELIVERED: frozenset[str] = frozenset(
    {"InPktsUntagged", "InPktsUnknownSCI", "InPktsUnchecked", "InPktsDelayed", "InPktsOK",
     "InPktsInvalid", "InPktsUnusedSA"}
)


@dataclass
class TxSA:
    """A transmit SA: its key and next packet number."""

    an: int
    key: SaKey
    next_pn: int = 1
    active: bool = True
    OutPktsProtected: int = 0
    OutPktsEncrypted: int = 0


@dataclass
class RxSA:
    """A receive SA: its key, next expected PN (lowest acceptable + window)."""

    an: int
    key: SaKey
    next_pn: int = 1
    active: bool = True
    InPktsOK: int = 0
    InPktsInvalid: int = 0
    InPktsNotValid: int = 0
    InPktsNotUsingSA: int = 0
    InPktsUnusedSA: int = 0


@dataclass
class RxSC:
    """A receive secure channel (one peer's SCI) holding up to four SAs."""

    sci: bytes
    sas: dict[int, RxSA] = field(default_factory=dict)
    counters: SecYCounters = field(default_factory=SecYCounters)


def _check_an(an: int) -> int:
    if not isinstance(an, int) or not 0 <= an <= AN_MASK:
        raise ConfigError(f"association number must be 0..3, got {an!r}")
    return an


def _check_sci(sci: bytes | int) -> bytes:
    if isinstance(sci, int):
        sci = sci.to_bytes(SCI_LEN, "big")
    if len(sci) != SCI_LEN:
        raise ConfigError(f"SCI must be 8 bytes, got {len(sci)}")
    return bytes(sci)


class SecY:
    """One SecY: a transmit SC (our SCI) and receive SCs keyed by peer SCI.

    ``protect`` adds the SecTAG and ICV (and encrypts when ``encrypt``);
    ``validate`` returns the plaintext frame to deliver, or None when the frame
    is dropped; it never raises and always counts (see :data:`RX_DISPOSITIONS`).
    """

    def __init__(
        self,
        sci: bytes | int,
        suite: CipherSuite | str = CipherSuite.GCM_AES_128,
        *,
        encrypt: bool = True,
        include_sci: bool = True,
        end_station: bool = False,
        scb: bool = False,
        protect_frames: bool = True,
        validate: ValidateFrames | str = ValidateFrames.STRICT,
        replay_protect: bool = True,
        replay_window: int = 0,
        mtu: int | None = None,
    ) -> None:
        self.sci = _check_sci(sci)
        self.suite = CipherSuite.parse(suite)
        self._xpn = self.suite.xpn  # cached: read for every frame
        self._max_pn = self.suite.max_pn
        self.encrypt = encrypt
        self.include_sci = include_sci
        self.end_station = end_station
        self.scb = scb
        self.protect_frames = protect_frames
        self.validate_frames = (
            validate if isinstance(validate, ValidateFrames) else ValidateFrames(validate)
        )
        self.replay_protect = replay_protect
        if replay_window < 0 or replay_window > self.suite.max_pn:
            raise ConfigError(f"replay window out of range: {replay_window}")
        if self.suite.xpn and replay_window > (1 << 30):
            raise ConfigError("XPN replay window must not exceed 2**30")
        self.replay_window = replay_window
        if end_station and include_sci:
            raise ConfigError("end_station (ES) and include_sci (SC) are exclusive")
        if scb and include_sci:
            raise ConfigError("scb (SCB) and include_sci (SC) are exclusive")
        self.mtu = mtu
        self.encoding_an = 0
        self.tx_sas: dict[int, TxSA] = {}
        self.rx_scs: dict[bytes, RxSC] = {}
        self.counters = SecYCounters()

    # configuration -------------------------------------------------------
    def _key(self, key: bytes, ssci: bytes | int | None, salt: bytes | None) -> SaKey:
        return SaKey(self.suite, key, ssci, salt)

    def _check_pn(self, pn: int) -> int:
        if not 1 <= pn <= self.suite.max_pn:
            raise ConfigError(f"packet number must be 1..{self.suite.max_pn}, got {pn}")
        return pn

    def add_tx_sa(
        self,
        an: int,
        key: bytes,
        next_pn: int = 1,
        *,
        ssci: bytes | int | None = None,
        salt: bytes | None = None,
        active: bool = True,
        use: bool | None = None,
    ) -> None:
        """Install (or replace) a transmit SA; ``use`` makes it the encoding SA.

        By default the first SA installed becomes the encoding SA.
        """
        _check_an(an)
        self.tx_sas[an] = TxSA(an, self._key(key, ssci, salt), self._check_pn(next_pn), active)
        if use or (use is None and len(self.tx_sas) == 1):
            self.encoding_an = an

    def set_encoding_sa(self, an: int) -> None:
        """Switch transmission to the SA with this AN (key rotation)."""
        if _check_an(an) not in self.tx_sas:
            raise ConfigError(f"no transmit SA with AN {an}")
        self.encoding_an = an

    def remove_tx_sa(self, an: int) -> None:
        """Delete a transmit SA (no error if absent)."""
        self.tx_sas.pop(_check_an(an), None)

    def add_rx_sc(self, sci: bytes | int) -> RxSC:
        """Create the receive SC for a peer SCI (idempotent)."""
        sci = _check_sci(sci)
        return self.rx_scs.setdefault(sci, RxSC(sci))

    def add_rx_sa(
        self,
        sci: bytes | int,
        an: int,
        key: bytes,
        next_pn: int = 1,
        *,
        ssci: bytes | int | None = None,
        salt: bytes | None = None,
        active: bool = True,
    ) -> None:
        """Install (or replace) a receive SA on the SC for ``sci`` (created if needed)."""
        _check_an(an)
        rx_sc = self.add_rx_sc(sci)
        rx_sc.sas[an] = RxSA(an, self._key(key, ssci, salt), self._check_pn(next_pn), active)

    def remove_rx_sa(self, sci: bytes | int, an: int) -> None:
        """Delete a receive SA (no error if absent)."""
        rx_sc = self.rx_scs.get(_check_sci(sci))
        if rx_sc is not None:
            rx_sc.sas.pop(_check_an(an), None)

    # transmit ------------------------------------------------------------
    def protect(self, frame: bytes) -> bytes:
        """Return the MACsec frame for a plaintext Ethernet frame.

        Raises FrameError for a frame shorter than an Ethernet header or longer
        than the MTU, TransmitError when no transmit SA can be used.
        """
        c = self.counters
        if len(frame) < ETH_HLEN:
            raise FrameError("frame shorter than an Ethernet header")
        if self.mtu is not None and len(frame) - ETH_HLEN > self.mtu:
            c.OutPktsTooLong += 1
            raise FrameError(f"frame of {len(frame)} octets exceeds MTU {self.mtu}")
        if not self.protect_frames:
            c.OutPktsUntagged += 1
            return bytes(frame)
        sa = self.tx_sas.get(self.encoding_an)
        if sa is None or not sa.active:
            raise TransmitError(f"transmit SA {self.encoding_an} is not in use")
        pn = sa.next_pn
        if pn > self._max_pn:
            sa.active = False
            raise TransmitError(f"packet numbers of SA {sa.an} are exhausted")
        sa.next_pn = pn + 1
        user = frame[12:]
        user_len = len(user)
        tci = sa.an
        if self.include_sci:
            tci |= TCI_SC
        if self.end_station:
            tci |= TCI_ES
        if self.scb:
            tci |= TCI_SCB
        if self.encrypt:
            tci |= TCI_E | TCI_C
        sl = user_len if user_len < SHORT_LEN_LIMIT else 0
        header = bytes(frame[:12]) + _TAG.pack(ETH_P_MACSEC, tci, sl, pn & 0xFFFFFFFF)
        if self.include_sci:
            header += self.sci
        iv = sa.key.iv(self.sci, pn)
        if self.encrypt:
            out = header + sa.key.seal(iv, bytes(user), header)
            sa.OutPktsEncrypted += 1
            c.OutPktsEncrypted += 1
            c.OutOctetsEncrypted += user_len
        else:
            body = header + bytes(user)
            out = body + sa.key.seal(iv, b"", body)
            sa.OutPktsProtected += 1
            c.OutPktsProtected += 1
            c.OutOctetsProtected += user_len
        return out

    # receive -------------------------------------------------------------
    def _count(self, rx_sc: RxSC | None, name: str, n: int = 1) -> None:
        setattr(self.counters, name, getattr(self.counters, name) + n)
        if rx_sc is not None:
            setattr(rx_sc.counters, name, getattr(rx_sc.counters, name) + n)

    def _lookup_sc(self, frame: bytes, tci: int) -> tuple[bytes, RxSC | None]:
        if tci & TCI_SC:
            sci = bytes(frame[20:28])
        elif not tci & TCI_ES and len(self.rx_scs) == 1:
            sci = next(iter(self.rx_scs))
        else:
            sci = bytes(frame[6:12]) + b"\x00\x01"
        return sci, self.rx_scs.get(sci)

    def _recover_pn(self, wire_pn: int, next_pn: int) -> int:
        """Full PN: the wire PN for non-XPN; for XPN the PN nearest the SA's next PN.

        802.1AEbw recovers the upper 32 bits from the lowest acceptable PN so
        that the result is never below it; then a replay is never late and only
        fails its ICV (counted InPktsNotValid). Linux instead checks lateness on
        the low 32 bits before it decrypts (``pn_same_half`` in macsec.c) and
        counts a replay InPktsLate. Recovering the PN within 2**31 of the next
        PN (either way) gives Linux's result whenever the two low halves are in
        the same half of the 32-bit space, and also catches a replay from just
        across a half or 2**32 boundary, which Linux decrypts and counts NotValid.
        """
        if not self._xpn:
            return wire_pn
        pn = (next_pn & ~0xFFFFFFFF) | wire_pn
        if pn - next_pn >= 1 << 31 and pn >= 1 << 32:
            pn -= 1 << 32  # just behind, across the 2**32 boundary
        elif next_pn - pn > 1 << 31 and pn + (1 << 32) <= self._max_pn:
            pn += 1 << 32  # ahead, across the boundary
        return pn

    def validate(self, frame: bytes) -> bytes | None:
        """Verify (and decrypt) a received frame; None means dropped.

        Never raises on malformed input: it is counted as InPktsBadTag.
        """
        mode = self.validate_frames
        n = len(frame)
        if n < ETH_HLEN or frame[12] != 0x88 or frame[13] != 0xE5:
            if mode is ValidateFrames.STRICT:
                self._count(None, "InPktsNoTag")
                return None
            self._count(None, "InPktsUntagged")
            return bytes(frame)
        try:
            tag, tag_len = SecTag.unpack(frame, 12, n - 12 - SECTAG_LEN, ICV_LEN)
        except FrameError:
            self._count(None, "InPktsBadTag")
            return None
        if tag.pn == 0 and not self._xpn:
            self._count(None, "InPktsBadTag")
            return None
        tci = tag.tci
        hdr_len = 12 + tag_len
        frame = bytes(frame)
        header = frame[:hdr_len]
        strict_or_c = bool(tci & TCI_C) or mode is ValidateFrames.STRICT
        sci, rx_sc = self._lookup_sc(frame, tci)
        if rx_sc is None:
            if strict_or_c:
                self._count(None, "InPktsNoSCI")
                return None
            self._count(None, "InPktsUnknownSCI")
            return header[:12] + frame[hdr_len : n - ICV_LEN]
        rx_sa = rx_sc.sas.get(tag.an)
        if rx_sa is None or not rx_sa.active:
            if strict_or_c:
                self._count(rx_sc, "InPktsNotUsingSA")
                if rx_sa is not None:
                    rx_sa.InPktsNotUsingSA += 1
                return None
            self._count(rx_sc, "InPktsUnusedSA")
            if rx_sa is not None:
                rx_sa.InPktsUnusedSA += 1
            return header[:12] + frame[hdr_len : n - ICV_LEN]
        window = self.replay_window
        lowest = rx_sa.next_pn - window if rx_sa.next_pn > window else 0
        pn = self._recover_pn(tag.pn, rx_sa.next_pn)
        if self.replay_protect and pn < lowest:  # before decrypting, as Linux
            self._count(rx_sc, "InPktsLate")
            return None
        valid = False
        plain = None
        if mode is not ValidateFrames.DISABLED or tci & TCI_E:
            iv = rx_sa.key.iv(sci, pn)
            try:
                if tci & TCI_E:
                    plain = rx_sa.key.open(iv, frame[hdr_len:], header)
                else:
                    rx_sa.key.open(iv, frame[n - ICV_LEN:], frame[: n - ICV_LEN])
                valid = True
            except InvalidTag:
                valid = False
        c, sc_c = self.counters, rx_sc.counters  # the hot path: no getattr/setattr
        if mode is not ValidateFrames.DISABLED:
            # the secure data's octets, counted before the ICV verdict as Linux does
            # (macsec_post_decrypt): a frame that then fails validation counts too
            octets = n - hdr_len - ICV_LEN
            if tci & TCI_E:
                c.InOctetsDecrypted += octets
                sc_c.InOctetsDecrypted += octets
            else:
                c.InOctetsValidated += octets
                sc_c.InOctetsValidated += octets
        if not valid:
            if strict_or_c:
                self._count(rx_sc, "InPktsNotValid")
                rx_sa.InPktsNotValid += 1
                return None
            if mode is ValidateFrames.CHECK:
                self._count(rx_sc, "InPktsInvalid")
                rx_sa.InPktsInvalid += 1
            elif pn < lowest:
                self._count(rx_sc, "InPktsDelayed")
            else:
                self._count(rx_sc, "InPktsUnchecked")
            return header[:12] + (frame[hdr_len : n - ICV_LEN] if plain is None else plain)
        if plain is None:
            plain = frame[hdr_len : n - ICV_LEN]
        if pn < lowest:
            self._count(rx_sc, "InPktsDelayed")
        else:
            c.InPktsOK += 1
            sc_c.InPktsOK += 1
            rx_sa.InPktsOK += 1
            if pn >= rx_sa.next_pn:
                rx_sa.next_pn = pn + 1
        return header[:12] + plain

    # reporting -----------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """Counters of the SecY, its SAs and receive SCs as a JSON-able dict."""
        tx = {
            str(an): {"next_pn": sa.next_pn, "active": sa.active,
                      "OutPktsProtected": sa.OutPktsProtected,
                      "OutPktsEncrypted": sa.OutPktsEncrypted}
            for an, sa in sorted(self.tx_sas.items())
        }
        rx = {}
        for sci, rx_sc in self.rx_scs.items():
            sas = {}
            for an, sa in sorted(rx_sc.sas.items()):
                sas[str(an)] = {f.name: getattr(sa, f.name) for f in fields(sa)
                                if f.name not in ("an", "key")}
            rx[sci.hex()] = {"counters": rx_sc.counters.as_dict(), "sas": sas}
        return {
            "sci": self.sci.hex(),
            "encoding_an": self.encoding_an,
            "counters": self.counters.as_dict(),
            "tx_sas": tx,
            "rx_scs": rx,
        }
