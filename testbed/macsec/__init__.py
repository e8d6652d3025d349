"""IEEE 802.1AE MACsec in userspace, plus protected links between namespaces.

The core (:mod:`.frame`, :mod:`.cipher`, :mod:`.secy`) is pure Python on top
of ``cryptography``'s AES-GCM and has no system dependency; :mod:`.link` and
:mod:`.kernel` build protected links between network namespaces.
"""

from .cipher import CipherSuite, SaKey
from .errors import BackendError, ConfigError, FrameError, MacsecError, TransmitError
from .frame import ETH_P_MACSEC, ParsedFrame, SecTag, make_sci, parse
from .secy import (
    RX_DELIVERED,
    RX_DISPOSITIONS,
    RxSA,
    RxSC,
    SecY,
    SecYCounters,
    TxSA,
    ValidateFrames,
)

__all__ = [
    "ETH_P_MACSEC",
    "RX_DELIVERED",
    "RX_DISPOSITIONS",
    "BackendError",
    "CipherSuite",
    "ConfigError",
    "FrameError",
    "MacsecError",
    "ParsedFrame",
    "RxSA",
    "RxSC",
    "SaKey",
    "SecTag",
    "SecY",
    "SecYCounters",
    "TransmitError",
    "TxSA",
    "ValidateFrames",
    "make_sci",
    "parse",
]
