"""What one router (a PoP or a region namespace) runs: plain data the daemons render."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from topologies.params import Section


class Timers(Section):
    """BFD and OSPF timers of one scenario variant: the one model of them, from the
    scenario's ``backbone.timers`` (a variant's keys over its preset, :data:`PRESETS`) to
    the daemons' configuration. The defaults are the ``default`` preset."""

    bfd_ms: int = Field(300, ge=10, le=10000, description="BFD transmit and receive "
                                                          "interval, ms")
    bfd_multiplier: int = Field(3, ge=2, le=50, description="BFD detect multiplier: "
                                                            "intervals missed before down")
    hello_s: int = Field(10, ge=1, le=65535, description="OSPF hello interval, s")
    dead_s: int = Field(40, ge=1, le=65535, description="OSPF dead interval, s (above "
                                                        "hello_s)")
    spf_delay_ms: int = Field(0, ge=0, le=600000, description="OSPF SPF delay after a "
                                                              "change, ms")
    spf_hold_ms: int = Field(50, ge=0, le=600000, description="OSPF SPF initial hold, ms")
    spf_max_ms: int = Field(5000, ge=0, le=600000, description="OSPF SPF maximum hold, ms")
    lsa_interval_ms: int = Field(5000, ge=0, le=5000, description="MinLSInterval: gap "
                                 "between two originations of an LSA, ms")
    lsa_arrival_ms: int = Field(1000, ge=0, le=600000, description="MinLSArrival: newer "
                                "copies of an LSA arriving sooner are dropped, ms")
    retransmit_s: int = Field(5, ge=1, le=65535, description="OSPF LSA retransmit "
                              "interval: an LSA a neighbour has not acknowledged is sent "
                              "again after it, s")

    @field_validator("dead_s")
    @classmethod
    def _dead_after_hello(cls, value: int, info: ValidationInfo) -> int:
        if "hello_s" in info.data and value <= info.data["hello_s"]:
            raise ValueError("must exceed hello_s")
        return value


#: the named timer sets: a variant named like one starts from it, any other from default
PRESETS = {
    "default": Timers(),
    "fast": Timers(bfd_ms=100, bfd_multiplier=3, hello_s=1, dead_s=3, spf_delay_ms=0,
                   spf_hold_ms=20, spf_max_ms=200,
                   # a PoP with two links to the failed one loses them in two steps; with
                   # the default 5 s MinLSInterval its second router-LSA (and the repair)
                   # waited 5 s
                   lsa_interval_ms=100, lsa_arrival_ms=50),
}


def preset(name: str) -> Timers:
    """The timer set a variant named ``name`` starts from."""
    return PRESETS.get(name, PRESETS["default"])


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
