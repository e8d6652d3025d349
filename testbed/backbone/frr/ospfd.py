"""ospfd: OSPFv2 in area 0, point-to-point links, BFD on every adjacency, ECMP.

>>> from testbed.backbone.frr.router import Router, RouterInterface, RouterPaths, Timers
>>> r = Router("nyc", "tbdemonyc", "10.255.0.1", (RouterInterface("l0a", cost=28),
...            RouterInterface("lo", passive=True)), Timers(bfd_ms=100, hello_s=1, dead_s=3))
>>> text = Ospfd(r, RouterPaths(Path("/tmp"))).render()
>>> " ip ospf cost 28" in text, " ip ospf dead-interval 3" in text, " ip ospf passive" in text
(True, True, True)
"""

from __future__ import annotations

from pathlib import Path  # noqa: F401  (doctest)

from .bfdd import PROFILE, Bfdd
from .daemon import FrrDaemon, template
from .zebra import Zebra


class Ospfd(FrrDaemon):
    NAME = "ospfd"
    TEMPLATE = "ospfd.conf.tmpl"
    INTERFACE = "ospfd.interface.tmpl"
    PASSIVE = "ospfd.passive.tmpl"
    DEPENDS = (Zebra, Bfdd)

    def render(self) -> str:
        r, t = self.router, self.router.timers
        active, passive = template(self.INTERFACE), template(self.PASSIVE)
        interfaces = "".join(
            passive.substitute(ifname=i.name) if i.passive else
            active.substitute(ifname=i.name, cost=i.cost, hello_s=t.hello_s, dead_s=t.dead_s,
                              retransmit_s=t.retransmit_s,
                              bfd=(f" ip ospf bfd\n ip ospf bfd profile {PROFILE}\n"
                                   if r.bfd else ""))
            for i in r.interfaces)
        return template(self.TEMPLATE).substitute(
            hostname=r.name, interfaces=interfaces, router_id=r.router_id,
            max_paths=r.max_paths, spf_delay_ms=t.spf_delay_ms, spf_hold_ms=t.spf_hold_ms,
            spf_max_ms=t.spf_max_ms, lsa_interval_ms=t.lsa_interval_ms,
            lsa_arrival_ms=t.lsa_arrival_ms,
            # RFC 6987 stub router: its transit links carry the maximum metric, so a
            # dual-homed region is never the path between two PoPs
            stub="" if r.transit else " max-metric router-lsa administrative\n")
