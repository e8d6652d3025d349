"""Typed exceptions of the MACsec package (one base class to catch them all).

:class:`MacsecError` is a :class:`~testbed.errors.TestbedError`, so the CLI ends a
MACsec failure with one line, not a traceback.
"""

from testbed.errors import TestbedError


class MacsecError(TestbedError):
    """Base class of every error raised by :mod:`testbed.macsec`."""


class ConfigError(MacsecError, ValueError):
    """A configuration value is invalid (key length, AN, SCI, PN, names, ...)."""


class FrameError(MacsecError, ValueError):
    """The bytes are not a well-formed (MACsec) Ethernet frame."""


class TransmitError(MacsecError):
    """A frame cannot be protected: no transmit SA in use, or its PN is exhausted."""


class BackendError(MacsecError):
    """A link backend (userspace forwarder or kernel) failed to start or respond."""
