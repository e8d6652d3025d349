"""MACsec cipher suites: GCM-AES-128/256 and GCM-AES-XPN-128/256 (802.1AE 14.5-14.7).

AES-GCM itself comes from the ``cryptography`` package; this module only
builds the 96-bit IV and decides what is authenticated and what is encrypted:

* non-XPN: IV = SCI (64 bits) || PN (32 bits);
* XPN: IV = (SSCI (32 bits) || PN (64 bits)) XOR Salt (96 bits);
* integrity only: empty plaintext, the whole frame up to the ICV is the AAD;
* confidentiality (offset 0): AAD = DA | SA | SecTAG, plaintext = the rest.

>>> k = SaKey(CipherSuite.GCM_AES_128, bytes(16))
>>> k.iv(bytes(8), 1).hex()
'000000000000000000000001'
"""

from __future__ import annotations

import struct
from enum import Enum

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import ConfigError

__all__ = ["CipherSuite", "ConfigError", "InvalidTag", "SALT_LEN", "SSCI_LEN", "SaKey"]

SALT_LEN = 12
_PN32 = struct.Struct("!I")
SSCI_LEN = 4


class CipherSuite(Enum):
    """The four standard cipher suites; the value is the Linux ``ip macsec`` name."""

    GCM_AES_128 = "gcm-aes-128"
    GCM_AES_256 = "gcm-aes-256"
    GCM_AES_XPN_128 = "gcm-aes-xpn-128"
    GCM_AES_XPN_256 = "gcm-aes-xpn-256"

    @property
    def key_len(self) -> int:
        """SAK length in octets."""
        return 16 if self in (CipherSuite.GCM_AES_128, CipherSuite.GCM_AES_XPN_128) else 32

    @property
    def xpn(self) -> bool:
        """True for the extended packet numbering (64-bit PN) suites."""
        return self in (CipherSuite.GCM_AES_XPN_128, CipherSuite.GCM_AES_XPN_256)

    @property
    def max_pn(self) -> int:
        """Largest packet number an SA may use."""
        return (1 << 64) - 1 if self.xpn else (1 << 32) - 1

    @classmethod
    def parse(cls, name: str | CipherSuite) -> CipherSuite:
        """Accept an enum member, its value (``gcm-aes-128``) or its name."""
        if isinstance(name, CipherSuite):
            return name
        key = name.strip().lower().replace("_", "-")
        for suite in cls:
            if suite.value == key:
                return suite
        raise ConfigError(f"unknown cipher suite {name!r}")


class SaKey:
    """The keying material of one SA (SAK, and SSCI/salt for XPN) and its AEAD."""

    __slots__ = ("suite", "_aead", "_ssci", "_salt", "_xpn")

    def __init__(
        self,
        suite: CipherSuite,
        key: bytes,
        ssci: bytes | int | None = None,
        salt: bytes | None = None,
    ) -> None:
        self.suite = suite
        if len(key) != suite.key_len:
            raise ConfigError(f"{suite.value} needs a {suite.key_len}-byte key, got {len(key)}")
        self._aead = AESGCM(bytes(key))  # built once per SA, reused for every frame
        self._xpn = suite.xpn
        self._ssci = b""
        self._salt = b""
        if suite.xpn:
            if isinstance(ssci, int):
                ssci = struct.pack("!I", ssci)
            if ssci is None or len(ssci) != SSCI_LEN:
                raise ConfigError("XPN suites need a 4-byte SSCI")
            if salt is None or len(salt) != SALT_LEN:
                raise ConfigError("XPN suites need a 12-byte salt")
            self._ssci = bytes(ssci)
            self._salt = bytes(salt)

    def iv(self, sci: bytes, pn: int) -> bytes:
        """The 96-bit GCM IV for a frame with this SCI and (full) PN."""
        if not self._xpn:
            return sci + _PN32.pack(pn & 0xFFFFFFFF)
        raw = self._ssci + struct.pack("!Q", pn)
        return (int.from_bytes(raw, "big") ^ int.from_bytes(self._salt, "big")).to_bytes(
            SALT_LEN, "big"
        )

    def seal(self, iv: bytes, plaintext: bytes, aad: bytes) -> bytes:
        """Encrypt ``plaintext`` (may be empty) and append the 16-byte ICV."""
        return self._aead.encrypt(iv, plaintext, aad)

    def open(self, iv: bytes, ciphertext_and_icv: bytes, aad: bytes) -> bytes:
        """Check the ICV and decrypt; raise :class:`InvalidTag` when it fails."""
        return self._aead.decrypt(iv, ciphertext_and_icv, aad)
