"""A backbone no shipped topology makes: five PoPs in a ring, each span two links laid in
separate conduits, and two regions, each homed to two neighbouring PoPs.

Named in a scenario as ``backbone.topology: examples.backbones.pop_ring:PopRing`` (run
from the repository's top folder); ``testbed run`` loads it and holds what it builds to
the names and links an inline backbone must have and to the design rule (four separate
paths from every PoP to at least two others: here two direct links and the two ways
round the other side, to each neighbour).

>>> bb = PopRing.build()
>>> bb.counts()
{'pops': 5, 'regions': 2, 'links': 14}
>>> from topologies.backbone_check import design_check
>>> design_check(bb).ok
True
"""

from __future__ import annotations

from topologies.backbone import Backbone, BackboneTopology, Link, Pop, Region

#: PoP, metro area; in ring order
POPS = (("sea", "na"), ("sfo", "na"), ("lax", "na"), ("den", "na"), ("ord", "na"))
#: km between ring neighbours
SPAN_KM = (1100, 560, 1340, 1610, 2800)


class PopRing(BackboneTopology):
    """Five PoPs in a ring of doubled spans, two dual-homed regions."""

    NAME = "pop-ring"

    @classmethod
    def build(cls) -> Backbone:
        names = [name for name, _ in POPS]
        links = []
        for i, (a, km) in enumerate(zip(names, SPAN_KM, strict=True)):
            b = names[(i + 1) % len(names)]
            # the second conduit runs a longer way round the same span
            links += [Link(f"{a}-{b}-1", a, b, 200, km), Link(f"{a}-{b}-2", a, b, 200, km * 1.2)]
        return Backbone(pops=tuple(Pop(n, area) for n, area in POPS),
                        regions=(Region("us-west", ("sfo", "lax")),
                                 Region("us-central", ("den", "ord"))),
                        links=tuple(links))
