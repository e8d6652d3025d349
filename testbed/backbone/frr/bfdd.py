"""bfdd: sub-second failure detection on every OSPF adjacency (one shared profile)."""

from __future__ import annotations

from .daemon import FrrDaemon, template
from .zebra import Zebra

PROFILE = "backbone"


class Bfdd(FrrDaemon):
    NAME = "bfdd"
    TEMPLATE = "bfdd.conf.tmpl"
    DEPENDS = (Zebra,)

    def render(self) -> str:
        t = self.router.timers
        return template(self.TEMPLATE).substitute(
            hostname=self.router.name, profile=PROFILE, multiplier=t.bfd_multiplier,
            interval_ms=t.bfd_ms)
