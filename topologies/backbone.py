"""A WAN backbone as plain data: PoPs, regions, links and shared-risk groups.

PoPs are routers in metro areas; regions (datacenter campuses) are dual-homed to two
PoPs over access links. Backbone links have a capacity and a length (propagation at
200 km/ms in fibre). A shared-risk group (SRLG) is a subsea cable or a conduit that
carries several links: one cut takes all of them down. The design rule is checked in
:mod:`topologies.backbone_check`.

>>> bb = default_backbone()
>>> bb.counts()
{'pops': 8, 'regions': 4, 'links': 29}
>>> bb.link("nyc-lon-1").delay_ms
27.85
>>> [g.name for g in bb.groups_of("nyc-lon-2")]
['tat-north']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from topologies import plugins

#: speed of light in fibre, km per millisecond
FIBRE_KM_PER_MS = 200.0
#: what a link is laid as (``access``: a region's, derived from its PoPs)
LINK_KINDS = ("terrestrial", "subsea", "access")
#: what carries a shared-risk group's links
GROUP_KINDS = ("subsea-cable", "conduit")
#: a PoP's metro area: North America, Europe, the Middle East, Asia-Pacific (the order
#: the dashboard's map lays them out, west to east)
AREAS = ("na", "eu", "me", "apac")


@dataclass(frozen=True)
class Pop:
    """A point of presence: one backbone router in a metro area."""

    name: str
    area: str  # one of AREAS


@dataclass(frozen=True)
class Region:
    """A datacenter region, attached to the PoPs in ``pops`` (two or more)."""

    name: str
    pops: tuple[str, ...]
    uplink_mbps: float = 200.0


@dataclass(frozen=True)
class Link:
    """A point-to-point link between ``a`` and ``b`` (PoPs, or a region and a PoP)."""

    name: str
    a: str
    b: str
    capacity_mbps: float
    length_km: float
    kind: str = "terrestrial"

    @property
    def delay_ms(self) -> float:
        """One-way propagation delay over the fibre's length."""
        return round(self.length_km / FIBRE_KM_PER_MS, 3)


@dataclass(frozen=True)
class RiskGroup:
    """A subsea cable or a conduit: every link in ``links`` fails with it."""

    name: str
    kind: str
    links: tuple[str, ...]


@dataclass(frozen=True)
class Backbone:
    """The whole backbone; ``links`` holds PoP-PoP links, access links are derived."""

    pops: tuple[Pop, ...]
    regions: tuple[Region, ...]
    links: tuple[Link, ...]
    risk_groups: tuple[RiskGroup, ...] = field(default_factory=tuple)
    access_km: float = 50.0

    @property
    def access_links(self) -> tuple[Link, ...]:
        """One link per (region, PoP) attachment, named ``region-pop``."""
        return tuple(Link(f"{r.name}-{p}", r.name, p, r.uplink_mbps, self.access_km, "access")
                     for r in self.regions for p in r.pops)

    @property
    def all_links(self) -> tuple[Link, ...]:
        return self.links + self.access_links

    @property
    def nodes(self) -> tuple[str, ...]:
        """PoP names then region names: one router (namespace) each."""
        return tuple(p.name for p in self.pops) + tuple(r.name for r in self.regions)

    def link(self, name: str) -> Link:
        for link in self.all_links:
            if link.name == name:
                return link
        raise KeyError(name)

    def group(self, name: str) -> RiskGroup:
        for g in self.risk_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    def groups_of(self, link: str) -> list[RiskGroup]:
        return [g for g in self.risk_groups if link in g.links]

    def links_of(self, node: str) -> list[Link]:
        return [lk for lk in self.all_links if node in (lk.a, lk.b)]

    def counts(self) -> dict[str, int]:
        return {"pops": len(self.pops), "regions": len(self.regions),
                "links": len(self.all_links)}

    def to_dict(self) -> dict:
        return {"pops": [asdict(p) for p in self.pops],
                "regions": [{**asdict(r), "pops": list(r.pops)} for r in self.regions],
                "links": [{**asdict(lk), "delay_ms": lk.delay_ms} for lk in self.all_links],
                "risk_groups": [{**asdict(g), "links": list(g.links)}
                                for g in self.risk_groups]}

    @classmethod
    def from_dict(cls, data: dict) -> Backbone:
        """Build from the ``pops``/``regions``/``links``/``risk_groups`` of a scenario.

        Access links in ``links`` (kind ``access``) are ignored: they follow from regions.
        """
        return cls(
            pops=tuple(Pop(p["name"], p.get("area", "")) for p in data["pops"]),
            regions=tuple(Region(r["name"], tuple(r["pops"]), float(r.get("uplink_mbps", 200)))
                          for r in data["regions"]),
            links=tuple(Link(lk["name"], lk["a"], lk["b"], float(lk["capacity_mbps"]),
                             float(lk["length_km"]), lk.get("kind", "terrestrial"))
                        for lk in data["links"] if lk.get("kind") != "access"),
            risk_groups=tuple(RiskGroup(g["name"], g.get("kind", "conduit"), tuple(g["links"]))
                              for g in data.get("risk_groups", ())),
        )


# The default backbone --------------------------------------------------------
# Eight PoPs: three in North America, three in Europe joined by transatlantic cables,
# and the newer Dubai and Singapore PoPs. Parallel links over separate conduits or
# cables give every PoP four independent ways out; the two fibre pairs of the TAT
# north cable share one risk group and count once.
_POPS = (("nyc", "na"), ("ash", "na"), ("chi", "na"), ("lon", "eu"), ("ams", "eu"),
         ("fra", "eu"), ("dxb", "me"), ("sin", "apac"))
#: name, a, b, Mb/s, km, kind
_LINKS = (
    ("nyc-ash-1", "nyc", "ash", 400, 330, "terrestrial"),
    ("nyc-ash-2", "nyc", "ash", 400, 360, "terrestrial"),
    ("nyc-chi", "nyc", "chi", 400, 1150, "terrestrial"),
    ("ash-chi-1", "ash", "chi", 400, 950, "terrestrial"),
    ("ash-chi-2", "ash", "chi", 400, 1010, "terrestrial"),
    ("lon-ams", "lon", "ams", 400, 360, "terrestrial"),
    ("lon-fra", "lon", "fra", 400, 640, "terrestrial"),
    ("ams-fra", "ams", "fra", 400, 440, "terrestrial"),
    ("nyc-lon-1", "nyc", "lon", 200, 5570, "subsea"),
    ("nyc-lon-2", "nyc", "lon", 200, 5570, "subsea"),
    ("nyc-ams", "nyc", "ams", 200, 5860, "subsea"),
    ("ash-fra", "ash", "fra", 200, 6500, "subsea"),
    ("fra-dxb", "fra", "dxb", 200, 4800, "subsea"),
    ("lon-dxb", "lon", "dxb", 200, 5500, "subsea"),
    ("ams-dxb", "ams", "dxb", 100, 5200, "terrestrial"),
    ("dxb-sin-1", "dxb", "sin", 200, 5850, "subsea"),
    ("dxb-sin-2", "dxb", "sin", 200, 6100, "subsea"),
    ("fra-sin", "fra", "sin", 100, 10100, "subsea"),
    ("chi-sin", "chi", "sin", 100, 15000, "subsea"),
    ("chi-lon", "chi", "lon", 100, 6400, "subsea"),
    ("ash-dxb", "ash", "dxb", 100, 11200, "subsea"),
)
_GROUPS = (
    ("tat-north", "subsea-cable", ("nyc-lon-1", "nyc-lon-2")),
    ("tat-central", "subsea-cable", ("nyc-ams",)),
    ("smw-west", "subsea-cable", ("fra-dxb", "lon-dxb")),
    ("smw-east", "subsea-cable", ("dxb-sin-1",)),
    ("i95-east", "conduit", ("nyc-ash-1",)),
    ("i95-west", "conduit", ("nyc-ash-2",)),
)
_REGIONS = (("us-east", ("nyc", "ash")), ("eu-central", ("fra", "ams")),
            ("me-gulf", ("dxb", "lon")), ("ap-southeast", ("sin", "dxb")))


def default_backbone() -> Backbone:
    """The default backbone: 8 PoPs on four continents, 4 dual-homed regions."""
    return Backbone(
        pops=tuple(Pop(n, a) for n, a in _POPS),
        regions=tuple(Region(n, p) for n, p in _REGIONS),
        links=tuple(Link(*row) for row in _LINKS),
        risk_groups=tuple(RiskGroup(*row) for row in _GROUPS),
    )


def small_backbone() -> Backbone:
    """Four PoPs in a ring with two parallel links per span, two regions (for tests).

    >>> small_backbone().counts()
    {'pops': 4, 'regions': 2, 'links': 12}
    """
    pops = ("p1", "p2", "p3", "p4")
    links = []
    for i, a in enumerate(pops):
        b = pops[(i + 1) % len(pops)]
        for k in (1, 2):
            links.append(Link(f"{a}-{b}-{k}", a, b, 100, 100 * (i + 1) + 10 * k))
    return Backbone(pops=tuple(Pop(p, "na") for p in pops),
                    regions=(Region("ra", ("p1", "p2")), Region("rb", ("p3", "p4"))),
                    links=tuple(links))


class BackboneTopology:
    """A backbone a scenario names by ``backbone.topology``: the shipped ``default`` and
    ``small``, or one of one's own (``package.module:Class``, a subclass with a ``NAME``:
    examples/backbones/pop_ring.py), whose backbone is held to the same names and design
    rule as an inline one. (``inline`` is the section's own pops, regions and links.)"""

    NAME: ClassVar[str] = ""

    @classmethod
    def build(cls) -> Backbone:
        raise NotImplementedError


#: every backbone topology by name: the shipped ones, and those a scenario named
TOPOLOGIES = plugins.Registry("backbone topology", BackboneTopology)


@TOPOLOGIES.register
class Default(BackboneTopology):
    """8 PoPs on four continents, 4 dual-homed regions."""

    NAME = "default"
    build = staticmethod(default_backbone)


@TOPOLOGIES.register
class Small(BackboneTopology):
    """Four PoPs in a ring, two regions."""

    NAME = "small"
    build = staticmethod(small_backbone)


#: the backbone topologies the lab ships
SHIPPED = tuple(TOPOLOGIES)
