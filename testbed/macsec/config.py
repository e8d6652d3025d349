"""Configuration model of a protected point-to-point link, shared by both backends.

A link joins side ``a`` and side ``b``, each in its own network namespace.
Each side has one transmit secure channel (its SCI) with per-AN SAKs; the
peer holds the matching receive SC. SAKs and SCIs come from the config or are
generated per run (:meth:`LinkConfig.generate`).

>>> cfg = LinkConfig.generate("t1")
>>> cfg.side("a").netns, cfg.side("b").tap, cfg.side("a").veth
('tbt1a', 'tbt1tb', 'tbt1va')
>>> LinkConfig.from_dict(cfg.to_dict()) == cfg
True
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import zlib
from dataclasses import asdict, dataclass, field

from .cipher import CipherSuite
from .errors import ConfigError
from .secy import ValidateFrames

PREFIX = "tb"
IFNAMSIZ = 15
_RUN_ID = re.compile(r"^[a-z0-9]{1,10}$")
#: Octets MACsec adds to each frame (16-byte SecTAG with SCI, 16-byte ICV).
OVERHEAD = 32


@dataclass(frozen=True)
class SideConfig:
    """One end of the link: names, addresses and its transmit SAKs (AN -> hex)."""

    name: str
    netns: str
    tap: str
    veth: str
    mac: str
    ip: str  # with prefix length, e.g. 10.1.2.1/24
    sci: str  # 16 hex digits
    keys: dict[int, str] = field(default_factory=dict)
    ssci: int = 0

    @property
    def address(self) -> str:
        """The IP without prefix length."""
        return self.ip.split("/")[0]


@dataclass(frozen=True)
class LinkConfig:
    """Everything both backends need to build the same protected link."""

    run_id: str
    a: SideConfig
    b: SideConfig
    suite: str = CipherSuite.GCM_AES_128.value
    encrypt: bool = True
    validate: str = ValidateFrames.STRICT.value
    replay_protect: bool = True
    replay_window: int = 0
    mtu: int = 1500
    initial_an: int = 0
    salt: str = ""  # 24 hex digits, XPN only
    #: propagation delay each side's forwarder holds its frames for (userspace backend,
    #: where the kernel has no netem); 0: none
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if not _RUN_ID.fullmatch(self.run_id):
            raise ConfigError(f"run id must be 1-10 of [a-z0-9], got {self.run_id!r}")
        suite = CipherSuite.parse(self.suite)
        ValidateFrames(self.validate)
        if not 0 <= self.delay_ms <= 10_000:
            raise ConfigError(f"delay must be 0..10000 ms, got {self.delay_ms}")
        for side in (self.a, self.b):
            for name in (side.tap, side.veth):
                if len(name) > IFNAMSIZ or not name.startswith(PREFIX):
                    raise ConfigError(f"interface name {name!r} must start with tb, <= 15 chars")
            if not ipaddress.ip_interface(side.ip).ip.is_private or not side.ip.startswith("10."):
                raise ConfigError(f"only 10.x addresses are allowed, got {side.ip}")
            if len(bytes.fromhex(side.sci)) != 8:
                raise ConfigError(f"SCI must be 8 bytes, got {side.sci}")
            for an, key in side.keys.items():
                if not 0 <= int(an) <= 3 or len(bytes.fromhex(key)) != suite.key_len:
                    raise ConfigError(f"bad SAK for AN {an} on side {side.name}")
            if self.initial_an not in {int(k) for k in side.keys}:
                raise ConfigError(f"side {side.name} has no SAK for AN {self.initial_an}")
        if suite.xpn and len(bytes.fromhex(self.salt)) != 12:
            raise ConfigError("XPN suites need a 12-byte salt")
        if not 68 <= self.mtu <= 65535 - OVERHEAD:
            raise ConfigError(f"MTU must be 68..{65535 - OVERHEAD}, got {self.mtu}")

    def side(self, name: str) -> SideConfig:
        """Side ``a`` or ``b``."""
        if name not in ("a", "b"):
            raise ConfigError(f"side must be 'a' or 'b', got {name!r}")
        return self.a if name == "a" else self.b

    def peer(self, name: str) -> SideConfig:
        """The other side."""
        return self.side("b" if name == "a" else "a")

    @property
    def cipher_suite(self) -> CipherSuite:
        """The suite as an enum member."""
        return CipherSuite.parse(self.suite)

    def to_dict(self) -> dict[str, object]:
        """JSON-able form (AN keys become strings)."""
        data = asdict(self)
        for s in ("a", "b"):
            data[s]["keys"] = {str(k): v for k, v in data[s]["keys"].items()}
        return data

    def public_dict(self) -> dict[str, object]:
        """:meth:`to_dict` without the SAKs: what may be written where others read (a
        results folder); :meth:`keys_dict` holds the rest.

        >>> cfg = LinkConfig.generate("t2")
        >>> "keys" in cfg.public_dict()["a"], LinkConfig.from_dict(
        ...     cfg.public_dict(), keys=cfg.keys_dict()) == cfg
        (False, True)
        """
        data = self.to_dict()
        for s in ("a", "b"):
            data[s].pop("keys")  # type: ignore[attr-defined]
        return data

    def keys_dict(self) -> dict[str, dict[str, str]]:
        """Each side's SAKs (side -> AN -> hex): the part :meth:`public_dict` leaves out."""
        return {s: {str(an): k for an, k in self.side(s).keys.items()} for s in ("a", "b")}

    @classmethod
    def from_dict(cls, data: dict[str, object],
                  keys: dict[str, dict[str, str]] | None = None) -> LinkConfig:
        """Inverse of :meth:`to_dict` (or of :meth:`public_dict` with ``keys``, as
        :meth:`keys_dict` gives them)."""
        data = dict(data)
        for s in ("a", "b"):
            side = dict(data[s])  # type: ignore[arg-type]
            given = keys[s] if keys is not None else side.get("keys", {})
            side["keys"] = {int(k): v for k, v in given.items()}
            data[s] = SideConfig(**side)
        return cls(**data)  # type: ignore[arg-type]

    def rekeyed(self) -> LinkConfig:
        """The same link with fresh random SAKs (one per side, at ``initial_an``) and a
        fresh XPN salt: a link built from it never repeats a (SAK, SCI, PN) of this one,
        although its packet numbers start again at 1."""
        suite = CipherSuite.parse(self.suite)
        sides = [dataclasses.replace(side, keys={
            self.initial_an: os.urandom(suite.key_len).hex()}) for side in (self.a, self.b)]
        return dataclasses.replace(self, a=sides[0], b=sides[1],
                                   salt=os.urandom(12).hex() if suite.xpn else "")

    @classmethod
    def generate(
        cls,
        run_id: str,
        *,
        suite: str | CipherSuite = CipherSuite.GCM_AES_128,
        subnet: str | None = None,
        **options: object,
    ) -> LinkConfig:
        """A config with names from the run id and fresh random SAKs and SCIs.

        The /24 subnet defaults to one in 10.128.0.0/9 derived from the run id.
        """
        suite = CipherSuite.parse(suite)
        if not _RUN_ID.fullmatch(run_id):
            raise ConfigError(f"run id must be 1-10 of [a-z0-9], got {run_id!r}")
        crc = zlib.crc32(run_id.encode())
        if subnet is None:
            subnet = f"10.{128 + crc % 128}.{(crc >> 8) % 256}.0/24"
        net = ipaddress.ip_network(subnet)
        initial_an = int(options.get("initial_an", 0))  # type: ignore[call-overload]
        sides = []
        for i, s in enumerate("ab"):
            mac = f"02:74:62:{(crc >> 16) & 0xFF:02x}:{crc & 0xFF:02x}:{i + 1:02x}"
            sides.append(SideConfig(
                name=s,
                netns=f"{PREFIX}{run_id}{s}",
                tap=f"{PREFIX}{run_id}t{s}",
                veth=f"{PREFIX}{run_id}v{s}",
                mac=mac,
                ip=f"{net[i + 1]}/{net.prefixlen}",
                sci=mac.replace(":", "") + "0001",
                keys={initial_an: os.urandom(suite.key_len).hex()},
                ssci=i + 1,
            ))
        salt = os.urandom(12).hex() if suite.xpn else ""
        return cls(run_id, sides[0], sides[1], suite=suite.value, salt=salt,
                   **options)  # type: ignore[arg-type]
