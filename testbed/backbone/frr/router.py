"""What one router (a PoP or a region namespace) runs: plain data the daemons render."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Timers:
    """BFD and OSPF timers of one scenario variant."""

    bfd_ms: int = 300
    bfd_multiplier: int = 3
    hello_s: int = 10
    dead_s: int = 40
    spf_delay_ms: int = 0
    spf_hold_ms: int = 50
    spf_max_ms: int = 5000
    lsa_interval_ms: int = 5000  # MinLSInterval: gap between two originations of an LSA
    lsa_arrival_ms: int = 1000  # MinLSArrival: newer copies arriving sooner are dropped


@dataclass(frozen=True)
class RouterInterface:
    """An interface OSPF runs on; ``passive`` ones are announced but form no adjacency."""

    name: str
    cost: int = 10
    passive: bool = False


@dataclass(frozen=True)
class BgpNeighbor:
    """A BGP session on a link: the peer's link address and AS, over our interface."""

    address: str
    asn: int
    ifname: str


@dataclass(frozen=True)
class Router:
    """One FRR instance: its namespace, router id, interfaces and timers."""

    name: str
    netns: str
    router_id: str
    interfaces: tuple[RouterInterface, ...]
    timers: Timers = field(default_factory=Timers)
    max_paths: int = 8
    transit: bool = True  # False: a stub router (a region), never a path between others
    bfd: bool = True  # sessions and adjacencies use bfdd (which must run then)
    asn: int = 0  # BGP: this router's AS
    neighbors: tuple[BgpNeighbor, ...] = ()  # BGP: one session per link
    networks: tuple[str, ...] = ()  # BGP: the prefixes it originates


@dataclass(frozen=True)
class RouterPaths:
    """Per-router files under the run folder: configs, pid files, vty sockets, zserv.

    Sockets are not scoped by network namespace, so every router gets its own folder.

    >>> p = RouterPaths(Path("/run/testbed/1a2b/frr/nyc"))
    >>> str(p.zserv), p.pid("ospfd").name
    ('/run/testbed/1a2b/frr/nyc/zserv.api', 'ospfd.pid')
    """

    root: Path

    @property
    def zserv(self) -> Path:
        return self.root / "zserv.api"

    @property
    def vty_dir(self) -> Path:
        return self.root

    def config(self, daemon: str) -> Path:
        return self.root / f"{daemon}.conf"

    def pid(self, daemon: str) -> Path:
        return self.root / f"{daemon}.pid"

    def vty(self, daemon: str) -> Path:
        return self.root / f"{daemon}.vty"

    def log(self, daemon: str) -> Path:
        return self.root / f"{daemon}.log"
