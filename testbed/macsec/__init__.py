"""IEEE 802.1AE MACsec in userspace, plus protected links between namespaces.

The core (:mod:`.frame`, :mod:`.cipher`, :mod:`.secy`) is pure Python on top
of ``cryptography``'s AES-GCM and has no system dependency; :mod:`.link` and
:mod:`.kernel` build protected links between network namespaces.
"""

from .cipher import CipherSuite, SaKey
from .config import LinkConfig, SideConfig
from .errors import BackendError, ConfigError, FrameError, MacsecError, TransmitError
from .frame import ETH_P_MACSEC, ParsedFrame, SecTag, make_sci, parse
from .kernel import KernelMacsecLink, create_link, kernel_macsec_available
from .link import UserspaceLink
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
    "KernelMacsecLink",
    "LinkConfig",
    "MacsecError",
    "ParsedFrame",
    "RxSA",
    "RxSC",
    "SaKey",
    "SecTag",
    "SecY",
    "SecYCounters",
    "SideConfig",
    "TransmitError",
    "TxSA",
    "UserspaceLink",
    "ValidateFrames",
    "create_link",
    "kernel_macsec_available",
    "make_sci",
    "parse",
]
